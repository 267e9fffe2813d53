"""One batch, one transaction: raw spans (idempotent) plus their normalised rows."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg
from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc

from collectors import landing
from collectors.normalise import normalise
from gate.db import storage
from gate.db.base import utcnow
from gate.db.rows import SpanRow

# SQLSTATE classes that blame the values written, not the database: 22 data exception (too
# long, out of range, bad encoding), 23 integrity constraint violation, 54 program limit
# exceeded (a value too large for an index). Everything else (read-only after a failover
# 25006, permission 42501, a missing table, a lost connection) says "not usable right now".
_DATA_CLASSES = ("22", "23", "54")
# Value errors raised before the database sees the rows (encoding, adapting, normalising).
_VALUE_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    OverflowError,
    psycopg.DataError,
    psycopg.IntegrityError,
    sqlite3.DataError,
    sqlite3.IntegrityError,
)


def is_conflict(exc: BaseException) -> bool:
    """Whether a write was aborted by a deadlock or serialization failure (worth rerunning)."""
    orig = exc.orig if isinstance(exc, sa_exc.StatementError) else exc
    # SQLSTATE class 40: psycopg maps a deadlock (40P01) to OperationalError, not to
    # TransactionRollback, so the class decides rather than the Python type.
    return isinstance(orig, psycopg.Error) and (orig.sqlstate or "").startswith("40")


def is_data_error(exc: BaseException) -> bool:
    """Whether a write failed because of the rows themselves (splitting them can help)."""
    orig = exc.orig if isinstance(exc, sa_exc.StatementError) else exc
    if isinstance(orig, psycopg.Error) and orig.sqlstate:
        return orig.sqlstate[:2] in _DATA_CLASSES
    return isinstance(orig, _VALUE_ERRORS)


def is_transient(exc: BaseException) -> bool:
    """Whether a write failed for a reason other than its rows: keep them and retry later."""
    return not is_conflict(exc) and not is_data_error(exc)


@dataclass(slots=True)
class Landed:
    """What one committed batch stored."""

    spans_new: int = 0
    spans_duplicate: int = 0
    generation_ids: list[int] = field(default_factory=list)
    pair_ids: list[uuid.UUID] = field(default_factory=list)
    normalise_skipped: int = 0
    fields_dropped: int = 0


class SpanStore:
    """Writes batches of spans and their normalised rows to the database of `engine`."""

    def __init__(self, engine: Engine, *, pair_deadline_s: float) -> None:
        self.engine = engine
        self.pair_deadline_s = pair_deadline_s
        self.storage = storage.of(engine)

    def write(self, rows: Sequence[SpanRow], *, normalise_rows: bool = True) -> Landed:
        """Store `rows` in one transaction, then join vLLM spans to generations; raise on
        failure (nothing is stored, or the batch is but its join is not: either way the
        batch is retried or spooled, and writing it again is idempotent)."""
        with self.engine.connect() as conn:
            try:
                with conn.begin():
                    landed, pending = self._write(conn, rows, normalise_rows)
                if pending:
                    # Only once the batch is committed can the join see a concurrent
                    # batch's rows that committed first (`collectors.landing`).
                    with conn.begin():
                        landing.join(conn, self.storage, pending)
                return landed
            except Exception as exc:
                # A raw COPY failure bypasses SQLAlchemy's disconnect detection; and after
                # a failover a pooled connection may still point at the demoted node.
                if is_transient(exc) and not conn.invalidated:
                    conn.invalidate()
                raise

    def _write(
        self, conn: Connection, rows: Sequence[SpanRow], normalise_rows: bool
    ) -> tuple[Landed, landing.PendingJoin]:
        received_at = utcnow()
        stored, normalised = list(rows), None
        if normalise_rows:
            normalised = normalise(stored, pair_deadline_s=self.pair_deadline_s)
            # Content a normalised row holds is not stored a second time in `spans`.
            stored = normalised.spans
        new = self.storage.insert_spans(conn, stored, received_at)
        landed = Landed(spans_new=new, spans_duplicate=len(rows) - new)
        if normalised is None:
            return landed, landing.PendingJoin()
        generations, pending = landing.land(conn, self.storage, normalised)
        landed.generation_ids = [generation[0] for generation in generations]
        # Pairs a new generation or a pair span landed in: where gate/pairs should look.
        pair_ids = {pair_id for _, pair_id, _, _ in generations if pair_id is not None}
        landed.pair_ids = sorted(pair_ids | {pair["id"] for pair in normalised.pairs}, key=str)
        landed.normalise_skipped = normalised.skipped
        landed.fields_dropped = normalised.fields_dropped
        return landed, pending
