"""The deploy documents (deploy/PRODUCTION.md and the READMEs) name real settings, real
commands with real options, and files that exist."""

from __future__ import annotations

import re
import shlex

import pytest

from gate.settings import CollectorSettings, Settings
from tests.deploy.compose import ROOT
from tests.deploy.tools import assert_cli_command

DOCS = [
    ROOT / "deploy" / "PRODUCTION.md",
    ROOT / "deploy" / "README.md",
    ROOT / "deploy" / "compose" / "README.md",
    ROOT / "deploy" / "k8s" / "README.md",
    ROOT / "docs" / "gate.md",
]
SETTINGS = {f"SPECGATE_{n.upper()}" for n in Settings.model_fields} | {
    f"SPECGATE_{n.upper()}" for n in CollectorSettings.model_fields
}
# Not settings: Compose's image variables and Grafana's datasource variables; the prefix
# of route credential variables (`--auth env:SPECGATE_ROUTE_<NAME>`).
OTHER = {"SPECGATE_IMAGE", "SPECGATE_ENGINES_IMAGE", "SPECGATE_ROUTE_"}


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_variables_are_real_settings(path):
    named = set(re.findall(r"\bSPECGATE_[A-Z0-9_]+\b", path.read_text()))
    unknown = {n for n in named - SETTINGS - OTHER if not n.startswith("SPECGATE_PG_")}
    assert not unknown, unknown


def documented_commands(text: str) -> list[list[str]]:
    """`specgate ...` in inline code, and command lines in fenced blocks (including
    `docker compose run --rm migrate ...`, which runs the specgate entrypoint)."""
    out = [shlex.split(c) for c in re.findall(r"`specgate ([^`]+)`", text)]
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.split("#")[0]
            match = re.match(r"\s*(?:specgate|docker compose run --rm migrate) (.*)", line)
            if match:
                out.append(shlex.split(match.group(1)))
    return out


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_commands_are_real(path):
    for words in documented_commands(path.read_text()):
        words = [w for w in words if w != "..."]
        assert_cli_command(words, f"{path.name}: specgate {' '.join(words)}")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_files_named_exist(path):
    for name in re.findall(r"`((?:\.\./|deploy/|tests/|gate/)[\w./-]+)`", path.read_text()):
        candidates = [ROOT / name, path.parent / name, ROOT / "deploy" / name]
        assert any(c.exists() for c in candidates), name
    for name in re.findall(r"^\| `([\w./-]+)`", path.read_text(), re.MULTILINE):
        candidates = [path.parent / n.strip() for n in name.split(",")]
        assert all(c.exists() for c in candidates), name
