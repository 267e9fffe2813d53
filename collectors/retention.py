"""Retention: purge captured content after a short age and raw spans after a longer one.

Partitioned `spans` (`gate.db.partitions`) lose whole partitions; unpartitioned tables are
deleted from in batches.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, MetaData, Table, delete, null, select, tuple_, update

from gate.db import partitions, storage
from gate.db.base import utcnow
from gate.db.engine import engine_from_settings
from gate.db.models import Generation, RequestRecord, SpanRecord
from gate.db.storage import Storage
from gate.settings import CollectorSettings, Settings
from gate.telemetry import attributes as a

log = logging.getLogger(__name__)

_SPANS: Table = SpanRecord.__table__  # type: ignore[assignment]
_GENERATIONS: Table = Generation.__table__  # type: ignore[assignment]
_REQUESTS: Table = RequestRecord.__table__  # type: ignore[assignment]
# Span attributes that carry captured content; the rest of the span is kept until it ages out.
CONTENT_ATTRIBUTES = (a.PROMPT, a.OUTPUT, a.OUTPUT_EXTRA, a.REQUEST_BODY)


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """Rows touched by one purge (and the span partitions it dropped)."""

    spans_deleted: int
    spans_scrubbed: int
    generations_scrubbed: int
    requests_scrubbed: int
    partitions_dropped: tuple[str, ...] = ()

    @property
    def touched(self) -> int:
        """All rows deleted or scrubbed."""
        return (
            self.spans_deleted
            + self.spans_scrubbed
            + self.generations_scrubbed
            + self.requests_scrubbed
        )


def run_purge(settings: Settings) -> PurgeResult:
    """Purge once with a fresh engine (what a periodic task calls)."""
    engine = engine_from_settings(settings)
    try:
        return purge(engine, settings)
    finally:
        engine.dispose()


def purge(
    engine: Engine, settings: CollectorSettings, *, now: datetime | None = None
) -> PurgeResult:
    """Purge content older than its age, then spans older than theirs, in batches."""
    now = now or utcnow()
    content_cut = now - timedelta(days=settings.retention_content_days)
    spans_cut = now - timedelta(days=settings.retention_spans_days)
    size = settings.retention_batch_rows
    chosen = storage.of(engine)
    dropped, spans = _drop_span_partitions(engine, chosen, spans_cut)
    result = PurgeResult(
        spans_deleted=_repeat(engine, lambda: _delete_spans(spans, spans_cut, size)),
        spans_scrubbed=_repeat(engine, lambda: _scrub_spans(content_cut, size, chosen)),
        generations_scrubbed=_repeat(engine, lambda: _scrub_generations(content_cut, size, now)),
        requests_scrubbed=_repeat(engine, lambda: _scrub_requests(content_cut, size)),
        partitions_dropped=tuple(dropped),
    )
    log.info(
        "collector.retention_purged spans_deleted=%d spans_scrubbed=%d generations_scrubbed=%d "
        "requests_scrubbed=%d partitions_dropped=%d",
        result.spans_deleted, result.spans_scrubbed, result.generations_scrubbed,
        result.requests_scrubbed, len(dropped),
    )  # fmt: skip
    return result


def _repeat(engine: Engine, statement: Any) -> int:
    """Run a batch statement, one transaction each, until a batch comes back short."""
    total = 0
    while True:
        with engine.begin() as conn:
            query, size = statement()
            count = max(conn.execute(query).rowcount, 0)
        total += count
        if count < size:
            return total


def _drop_span_partitions(
    engine: Engine, chosen: Storage, cut: datetime
) -> tuple[list[str], Table]:
    """Drop span partitions wholly past `cut`; return them and where rows are still deleted.

    On partitioned `spans` only its default partition is deleted from row by row: the
    partition straddling the cut goes whole at a later turn.
    """
    if not chosen.partitions:
        return [], _SPANS
    with engine.connect() as conn:
        period = partitions.period_s(conn, _SPANS.name)
    if period is None:
        return [], _SPANS
    dropped = partitions.drop_before(engine, _SPANS.name, cut)
    return dropped, _SPANS.to_metadata(MetaData(), name=f"{_SPANS.name}_default")


def _delete_spans(table: Table, cut: datetime, size: int) -> tuple[Any, int]:
    key = tuple_(table.c.trace_id, table.c.span_id)
    old = select(table.c.trace_id, table.c.span_id).where(table.c.start_time < cut).limit(size)
    return delete(table).where(key.in_(old)), size


def _scrub_spans(cut: datetime, size: int, chosen: Storage) -> tuple[Any, int]:
    attributes = _SPANS.c.attributes
    keys = list(CONTENT_ATTRIBUTES)
    holds = chosen.json_has_any_key(attributes, keys)
    scrubbed = chosen.json_without_keys(attributes, keys)
    key = tuple_(_SPANS.c.trace_id, _SPANS.c.span_id)
    old = select(_SPANS.c.trace_id, _SPANS.c.span_id).where(_SPANS.c.start_time < cut, holds)
    return update(_SPANS).where(key.in_(old.limit(size))).values(attributes=scrubbed), size


def _scrub_generations(cut: datetime, size: int, now: datetime) -> tuple[Any, int]:
    table = _GENERATIONS
    old = (
        select(table.c.id)
        .where(table.c.started_at < cut, table.c.content_purged_at.is_(None))
        .limit(size)
    )
    values = {"prompt": None, "output": None, "output_extra": null(), "content_purged_at": now}
    return update(table).where(table.c.id.in_(old)).values(values), size


def _scrub_requests(cut: datetime, size: int) -> tuple[Any, int]:
    table = _REQUESTS
    old = select(table.c.id).where(table.c.created_at < cut, table.c.body.is_not(None)).limit(size)
    return update(table).where(table.c.id.in_(old)).values(body=null()), size
