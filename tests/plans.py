"""EXPLAIN plans of the statements a piece of code runs (partition pruning, issue 43)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection, event

from gate.db.storage import pg_copy

Seen = list[tuple[str, Any]]


@contextmanager
def statements(
    conn: Connection, needle: str, monkeypatch: pytest.MonkeyPatch | None = None
) -> Iterator[Seen]:
    """Collect (statement, parameters) of each statement naming `needle` run on any of
    `conn`'s engine's connections (the export reads on one of its own, in one snapshot);
    with `monkeypatch`, those run on a raw psycopg cursor (`pg_copy.cursor`) too."""
    seen: Seen = []

    def capture(_conn, _cursor, statement, parameters, _context, _many) -> None:
        if needle in statement:
            seen.append((statement, parameters))

    if monkeypatch is not None:
        monkeypatch.setattr(pg_copy, "cursor", _spying(pg_copy.cursor, needle, seen))
    event.listen(conn.engine, "before_cursor_execute", capture)
    try:
        yield seen
    finally:
        event.remove(conn.engine, "before_cursor_execute", capture)


def _spying(make: Callable[[Connection], Any], needle: str, seen: Seen) -> Callable[..., Any]:
    def cursor(conn: Connection) -> _Spy:
        return _Spy(make(conn), needle, seen)

    return cursor


class _Spy:
    """A psycopg cursor that notes the statements naming `needle` it runs."""

    def __init__(self, real: Any, needle: str, seen: Seen) -> None:
        self._real, self._needle, self._seen = real, needle, seen

    def __enter__(self) -> _Spy:
        self._real.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._real.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def execute(self, statement: str, parameters: Any = None, **kw: Any) -> Any:
        if self._needle in statement:
            self._seen.append((statement, parameters))
        return self._real.execute(statement, parameters, **kw)


def explain(conn: Connection, statement: str, parameters: Any) -> str:
    """Return the plan Postgres makes for `statement` (EXPLAIN: nothing is run)."""
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    cursor.execute("EXPLAIN " + statement, parameters)
    return "\n".join(row[0] for row in cursor.fetchall())
