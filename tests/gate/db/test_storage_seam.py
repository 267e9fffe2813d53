"""The storage seam: the database is told apart in one place, chosen once per engine."""

from __future__ import annotations

import ast
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from gate.db import storage
from gate.db.engine import make_engine
from gate.db.storage.postgres import PostgresStorage
from gate.db.storage.sqlite import SqliteStorage

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("gate", "collectors", "evaluators")
# The two files that may tell the databases apart: the seam, and the settings' "embedded"
# default (which must not import the database layer).
DIALECT_TESTS_ALLOWED = {"gate/db/storage/__init__.py", "gate/settings.py"}
# Dialect-specific SQLAlchemy constructs live behind the seam.
DIALECT_IMPORTS_ALLOWED = ("gate/db/storage/",)
# Nothing may be exempt; kept as a name so the two checks read alike.
PENDING: tuple[str, ...] = ()
DIALECT_NAMES = ("postgres", "sqlite")


def dialect_tests(source: str) -> list[str]:
    """Return what in `source` tells the database dialect apart, one line each."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if _tests_dialect(node):
            found.append(f"line {getattr(node, 'lineno', '?')}: {ast.unparse(node)[:80]}")
    return found


def dialect_imports(source: str) -> list[str]:
    """Return the imports of dialect-specific SQLAlchemy modules in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        if any(name.startswith("sqlalchemy.dialects") for name in names):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def _tests_dialect(node: ast.AST) -> bool:
    # `x.dialect.name`, `url.get_backend_name()`, `x == "postgresql"`, `url.startswith("sqlite")`
    if isinstance(node, ast.Attribute) and node.attr in ("name", "driver"):
        value = node.value
        return isinstance(value, ast.Attribute) and value.attr == "dialect"
    if isinstance(node, ast.Attribute) and node.attr in ("get_backend_name", "get_dialect"):
        return True
    if isinstance(node, ast.Compare):
        return any(_names_dialect(part) for part in (node.left, *node.comparators))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ("startswith", "endswith") and any(
            _names_dialect(arg) for arg in node.args
        )
    return False


def _names_dialect(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.lower().startswith(DIALECT_NAMES)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_dialect(item) for item in node.elts)
    return False


def _sources() -> list[tuple[str, str]]:
    files = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    return [(path.relative_to(ROOT).as_posix(), path.read_text()) for path in files]


def test_detector_finds_each_kind_of_dialect_test() -> None:
    samples = [
        'postgres = engine.dialect.name == "postgresql"',
        "kind = session.get_bind().dialect.name",
        'if url.get_backend_name() == "sqlite": pass',
        'embedded = url.startswith("sqlite")',
        'ok = name in ("postgresql", "mysql")',
    ]
    assert all(dialect_tests(sample) for sample in samples)
    assert dialect_imports("from sqlalchemy.dialects import postgresql")
    assert dialect_imports("from sqlalchemy.dialects.sqlite import insert")
    assert not dialect_tests('name = "specgate"; ok = name == "chat"')
    assert not dialect_imports("from sqlalchemy import insert")


def test_at_most_two_files_tell_the_databases_apart() -> None:
    offenders = {
        path: found
        for path, source in _sources()
        if path not in DIALECT_TESTS_ALLOWED
        and not path.startswith(PENDING)
        and (found := dialect_tests(source))
    }
    assert offenders == {}
    assert len(DIALECT_TESTS_ALLOWED) <= 2


def test_dialect_specific_constructs_live_behind_the_seam() -> None:
    offenders = {
        path: found
        for path, source in _sources()
        if not path.startswith(DIALECT_IMPORTS_ALLOWED + PENDING)
        and (found := dialect_imports(source))
    }
    assert offenders == {}


def test_storage_is_chosen_when_the_engine_is_made(tmp_path: Path, pg_url: str) -> None:
    lite = make_engine(f"sqlite:///{tmp_path / 'seam.db'}")
    pg = make_engine(pg_url)
    try:
        assert isinstance(storage.of(lite), SqliteStorage)
        assert isinstance(storage.of(pg), PostgresStorage)
        assert storage.of(lite).single_writer and not storage.of(pg).single_writer
        for engine in (lite, pg):
            with engine.connect() as conn, Session(engine) as session:
                # The same object whichever handle asks: chosen once, not per call.
                assert storage.of(conn) is storage.of(engine) is storage.of(session)
    finally:
        lite.dispose()
        pg.dispose()


def test_an_engine_made_elsewhere_gets_its_storage_once() -> None:
    engine = create_engine("sqlite://")
    try:
        first = storage.of(engine)
        assert isinstance(first, SqliteStorage)
        assert storage.of(engine) is first
    finally:
        engine.dispose()


def test_one_transaction_helper() -> None:
    defined = [
        path
        for path, source in _sources()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == "transaction"
    ]
    assert defined == ["gate/db/engine.py"]
