"""One batch, one transaction: raw spans (idempotent) plus their normalised rows."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from sqlalchemy import Connection, Engine, Table
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import sqlite

from collectors import landing, pg_bulk
from collectors.normalise import normalise
from collectors.spans import SpanRow
from gate.db.base import utcnow
from gate.db.models import SpanRecord

_SPANS: Table = SpanRecord.__table__  # type: ignore[assignment]
# Errors that say "the database is not usable right now" rather than "this data is bad":
# the batch is spooled and retried instead of being split.
_TRANSIENT: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    pg_errors.UndefinedTable,
    pg_errors.UndefinedColumn,
    sqlite3.OperationalError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,
    ConnectionError,
    TimeoutError,
)


def is_conflict(exc: BaseException) -> bool:
    """Whether a write was aborted by a deadlock or serialization failure (worth rerunning)."""
    orig = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
    # SQLSTATE class 40: psycopg maps a deadlock (40P01) to OperationalError, not to
    # TransactionRollback, so the class decides rather than the Python type.
    return isinstance(orig, psycopg.Error) and (orig.sqlstate or "").startswith("40")


def is_transient(exc: BaseException) -> bool:
    """Whether a write failed because the database is unreachable or unusable for now."""
    if is_conflict(exc):
        return False
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        return isinstance(exc.orig, _TRANSIENT)
    return isinstance(exc, _TRANSIENT)


@dataclass(slots=True)
class Landed:
    """What one committed batch stored."""

    spans_new: int = 0
    spans_duplicate: int = 0
    generation_ids: list[int] = field(default_factory=list)
    pair_ids: list[uuid.UUID] = field(default_factory=list)
    normalise_skipped: int = 0


class SpanStore:
    """Writes batches of spans and their normalised rows to the database of `engine`."""

    def __init__(self, engine: Engine, *, pair_deadline_s: float) -> None:
        self.engine = engine
        self.pair_deadline_s = pair_deadline_s
        self.is_postgres = engine.dialect.name == "postgresql"

    def write(self, rows: Sequence[SpanRow], *, normalise_rows: bool = True) -> Landed:
        """Store `rows` in one transaction; raise on failure (nothing is then stored)."""
        with self.engine.connect() as conn:
            try:
                with conn.begin():
                    return self._write(conn, rows, normalise_rows)
            except Exception as exc:
                # A raw COPY failure bypasses SQLAlchemy's disconnect detection.
                if is_transient(exc) and not conn.invalidated:
                    conn.invalidate()
                raise

    def _write(self, conn: Connection, rows: Sequence[SpanRow], normalise_rows: bool) -> Landed:
        received_at = utcnow()
        stored, normalised = list(rows), None
        if normalise_rows:
            normalised = normalise(stored, pair_deadline_s=self.pair_deadline_s)
            # Content a normalised row holds is not stored a second time in `spans`.
            stored = normalised.spans
        if self.is_postgres:
            new = pg_bulk.insert_spans(conn, stored, received_at)
        else:
            new = _sqlite_insert_spans(conn, stored, received_at)
        landed = Landed(spans_new=new, spans_duplicate=len(rows) - new)
        if normalised is None:
            return landed
        generations = landing.land(conn, normalised)
        landed.generation_ids = [generation[0] for generation in generations]
        # Pairs a new generation or a pair span landed in: where gate/pairs should look.
        pair_ids = {pair_id for _, pair_id, _, _ in generations if pair_id is not None}
        landed.pair_ids = sorted(pair_ids | {pair["id"] for pair in normalised.pairs}, key=str)
        landed.normalise_skipped = normalised.skipped
        return landed


def _sqlite_insert_spans(conn: Connection, rows: Sequence[SpanRow], received_at: Any) -> int:
    statement = sqlite.insert(_SPANS).on_conflict_do_nothing()
    values = [
        {
            "trace_id": row.trace_id,
            "span_id": row.span_id,
            "parent_span_id": row.parent_span_id,
            "name": row.name,
            "kind": row.kind,
            "service": row.service,
            "start_time": row.start_time,
            "end_time": row.end_time,
            "status_code": row.status_code,
            "status_message": row.status_message,
            "attributes": row.attributes,
            "resource": row.resource,
            "extra": row.extra,
            "received_at": received_at,
        }
        for row in rows
    ]
    result = conn.execute(statement, values)
    return max(result.rowcount, 0)
