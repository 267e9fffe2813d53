"""docs/architecture.md, the map, names every table and every part of `gate/`."""

from __future__ import annotations

import re
from pathlib import Path

from gate.db.models import Base

ROOT = Path(__file__).resolve().parent.parent
MAP = ROOT / "docs" / "architecture.md"


def _named() -> set[str]:
    return set(re.findall(r"`([^`\s]+)`", MAP.read_text()))


def test_the_map_names_every_table():
    missing = set(Base.metadata.tables) - _named()
    assert missing == set()


def test_the_map_names_every_package_and_module_of_gate():
    parts = {
        f"gate/{path.name}/" if path.is_dir() else f"gate/{path.name}"
        for path in (ROOT / "gate").iterdir()
        if (path.is_dir() and (path / "__init__.py").is_file())
        or (path.suffix == ".py" and path.stem not in ("__init__", "__main__"))
    }
    assert parts - _named() == set()


def test_every_path_the_map_names_exists():
    paths = {
        name.split(" ")[0]
        for name in _named()
        if re.match(r"^(gate|collectors|evaluators|bench|tests)/", name)
    }
    assert {p for p in paths if not (ROOT / p).exists()} == set()
