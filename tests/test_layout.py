"""The tree keeps its shape: no import circles between modules, and README's layout table
names the folders that exist."""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gate", "collectors", "evaluators")


def module_files() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(body: list[ast.stmt], deferred: bool) -> Iterable[ast.stmt]:
    """The statements an import of the module runs (with `deferred`, also function bodies)."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.If) and not _type_checking(statement.test):
            yield from _statements(statement.body + statement.orelse, deferred)
        elif isinstance(statement, ast.Try):
            handlers = [s for h in statement.handlers for s in h.body]
            blocks = statement.body + handlers + statement.orelse + statement.finalbody
            yield from _statements(blocks, deferred)
        elif deferred and isinstance(
            statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.With
        ):
            yield from _statements(statement.body, deferred)


def imports(name: str, path: Path, known: Mapping[str, Path], *, deferred: bool) -> set[str]:
    """The project modules `name` imports (`from a import b` names module `a.b` if it is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for statement in _statements(ast.parse(path.read_text()).body, deferred):
        if isinstance(statement, ast.Import):
            out |= {alias.name for alias in statement.names}
        elif isinstance(statement, ast.ImportFrom):
            base = statement.module or ""
            if statement.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - statement.level + 1])
                base = f"{parent}.{base}" if base else parent
            for alias in statement.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return {module for module in out if module in known and module != name}


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def import_graph(*, deferred: bool) -> dict[str, set[str]]:
    known = module_files()
    return {name: imports(name, path, known, deferred=deferred) for name, path in known.items()}


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_level_import_circles():
    assert circles(import_graph(deferred=False)) == []


def test_no_import_circles_even_through_imports_deferred_into_functions():
    # The Celery app, its tasks and the gate's tasks once imported each other this way.
    assert circles(import_graph(deferred=True)) == []


def layout_rows() -> dict[str, str]:
    text = (ROOT / "README.md").read_text()
    table = text.split("\n## Layout\n", 1)[1].strip().split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        folder, owns = (cell.strip() for cell in line.strip("|").split("|", 1))
        name = folder.strip("`").rstrip("/")
        # A second row for a folder would pass a dict silently and say two things.
        assert name not in rows, f"README's layout table has two rows for {folder}"
        rows[name] = owns
    return rows


def test_the_layout_table_lists_every_top_level_folder():
    # The folders the repository holds; build and test output (ignored) are not layout.
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    folders = {path.split("/")[0] for path in tracked if "/" in path}
    folders = {name for name in folders if not name.startswith((".", "_"))}
    assert set(layout_rows()) == folders


def test_the_layout_table_names_every_package_of_gate_and_only_those():
    named = set(re.findall(r"`(\w+)/`", layout_rows()["gate"]))
    packages = {p.parent.name for p in (ROOT / "gate").glob("*/__init__.py")}
    assert named == packages
    for module in re.findall(r"`(\w+\.py)`", layout_rows()["gate"]):
        assert (ROOT / "gate" / module).is_file(), module


def test_the_configuration_table_names_every_setting_and_only_settings():
    from gate.settings import Settings

    text = (ROOT / "README.md").read_text()
    table = text.split("\n## Configuration\n", 1)[1].split("\n\nEvery CLI command", 1)[0]
    named = set(re.findall(r"`(SPECGATE_[A-Z0-9_]+)`", table))
    assert named == {f"SPECGATE_{field.upper()}" for field in Settings.model_fields}


def test_reason_codes_are_parsed_in_one_module_and_read_only_by_the_headline():
    # The words follow the gate's codes in one place: a second parser, or a surface that
    # branches on parsed codes itself, would say something else than the headline.
    headline = "gate.reports.headline"
    defined, used = set(), set()
    for name, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "parse_reason":
                defined.add(name)
            named = getattr(node, "attr", None) or getattr(node, "name", None)
            if isinstance(node, ast.alias | ast.Attribute) and named == "parse_reason":
                used.add(name)
    assert defined == {f"{headline}.reasons"}
    outside = {n for n in used if n != headline and not n.startswith(f"{headline}.")}
    assert outside == set()
