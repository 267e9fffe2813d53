"""One home per concept: each is defined once, and the other places import it."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

from tests.test_layout import module_files

ROOT = Path(__file__).resolve().parent.parent


def _trees() -> dict[str, ast.Module]:
    files = module_files()
    for path in (ROOT / "bench").glob("*.py"):
        files[f"bench.{path.stem}"] = path
    return {name: ast.parse(path.read_text()) for name, path in files.items()}


def _where(found: dict[str, ast.Module], test: Callable[[ast.AST], bool]) -> set[str]:
    return {name for name, tree in found.items() if any(test(n) for n in ast.walk(tree))}


def _calls(module: str, function: str) -> Callable[[ast.AST], bool]:
    def test(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == function
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == module
        )

    return test


def test_a_secret_is_hashed_under_the_server_secret_in_one_place():
    assert _where(_trees(), _calls("hmac", "new")) == {"gate.keys.service"}


def test_the_default_segments_are_listed_once():
    from gate.stats.policy import DEFAULT_SEGMENTS

    def listed(node: ast.AST) -> bool:
        if not isinstance(node, ast.List | ast.Tuple) or len(node.elts) != len(DEFAULT_SEGMENTS):
            return False
        values = {e.value for e in node.elts if isinstance(e, ast.Constant)}
        return values == set(DEFAULT_SEGMENTS)

    assert _where(_trees(), listed) == {"gate.stats.policy"}


def test_health_bodies_are_built_in_one_place():
    def gateway_body(node: ast.AST) -> bool:
        keys = {k.value for k in getattr(node, "keys", []) if isinstance(k, ast.Constant)}
        return isinstance(node, ast.Dict) and {"status", "routing_stale"} <= keys

    assert _where(_trees(), gateway_body) == {"gate.health"}


def test_engine_metric_names_are_read_through_the_scraper():
    # The local engines write vLLM's names (they are an engine); readers use the scraper's.
    def vllm_name(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and str(node.value).startswith("vllm:spec_decode")

    assert _where(_trees(), vllm_name) == {"collectors.scraper", "gate.engines.metrics"}
