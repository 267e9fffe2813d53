"""Retention: purge captured content after a short age, raw spans and engine samples later.

Partitioned tables (`gate.db.partitions`) lose whole partitions; unpartitioned tables and
default partitions are deleted from in batches. Pairs go only from a partitioned `pairs`,
whole partitions past their age and older than every pair of a rollout not ended.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    Column,
    Engine,
    MetaData,
    Table,
    delete,
    func,
    null,
    select,
    tuple_,
    update,
)

from gate.db import partitions, storage
from gate.db.base import utcnow
from gate.db.engine import engine_from_settings
from gate.db.models import EngineSample, Generation, Pair, RequestRecord, Rollout, SpanRecord
from gate.db.storage import Storage
from gate.settings import CollectorSettings, Settings
from gate.telemetry import attributes as a

log = logging.getLogger(__name__)

_SPANS: Table = SpanRecord.__table__  # type: ignore[assignment]
_GENERATIONS: Table = Generation.__table__  # type: ignore[assignment]
_REQUESTS: Table = RequestRecord.__table__  # type: ignore[assignment]
_SAMPLES: Table = EngineSample.__table__  # type: ignore[assignment]
# Span attributes that carry captured content; the rest of the span is kept until it ages out.
CONTENT_ATTRIBUTES = (a.PROMPT, a.OUTPUT, a.OUTPUT_EXTRA, a.REQUEST_BODY)


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """Rows touched by one purge (and the partitions it dropped)."""

    spans_deleted: int
    spans_scrubbed: int
    generations_scrubbed: int
    requests_scrubbed: int
    samples_deleted: int = 0
    partitions_dropped: tuple[str, ...] = ()

    @property
    def touched(self) -> int:
        """All rows deleted or scrubbed."""
        return (
            self.spans_deleted
            + self.spans_scrubbed
            + self.generations_scrubbed
            + self.requests_scrubbed
            + self.samples_deleted
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
    """Purge content older than its age, then spans and samples older than theirs."""
    now = now or utcnow()
    content_cut = now - timedelta(days=settings.retention_content_days)
    spans_cut = now - timedelta(days=settings.retention_spans_days)
    samples_cut = now - timedelta(days=settings.retention_samples_days)
    size = settings.retention_batch_rows
    chosen = storage.of(engine)
    span_parts, spans = _drop_partitions(engine, chosen, _SPANS, spans_cut)
    sample_parts, samples = _drop_partitions(engine, chosen, _SAMPLES, samples_cut)
    pair_parts = _drop_pairs(engine, chosen, now - timedelta(days=settings.retention_pairs_days))
    span_key = (spans.c.trace_id, spans.c.span_id)
    result = PurgeResult(
        spans_deleted=_repeat(
            engine, lambda: _delete_before(spans.c.start_time, span_key, spans_cut, size)
        ),
        spans_scrubbed=_repeat(engine, lambda: _scrub_spans(content_cut, size, chosen)),
        generations_scrubbed=_repeat(engine, lambda: _scrub_generations(content_cut, size, now)),
        requests_scrubbed=_repeat(engine, lambda: _scrub_requests(content_cut, size)),
        samples_deleted=_repeat(
            engine,
            lambda: _delete_before(samples.c.scraped_at, (samples.c.id,), samples_cut, size),
        ),
        partitions_dropped=tuple(span_parts + sample_parts + pair_parts),
    )
    log.info(
        "collector.retention_purged spans_deleted=%d spans_scrubbed=%d generations_scrubbed=%d "
        "requests_scrubbed=%d samples_deleted=%d partitions_dropped=%d",
        result.spans_deleted, result.spans_scrubbed, result.generations_scrubbed,
        result.requests_scrubbed, result.samples_deleted, len(result.partitions_dropped),
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


def _drop_partitions(
    engine: Engine, chosen: Storage, table: Table, cut: datetime
) -> tuple[list[str], Table]:
    """Drop a table's partitions wholly past `cut`; return them and where rows are still
    deleted.

    On a partitioned table only its default partition is deleted from row by row: the
    partition straddling the cut goes whole at a later turn.
    """
    if not chosen.partitions:
        return [], table
    with engine.connect() as conn:
        period = partitions.period_s(conn, table.name)
    if period is None:
        return [], table
    dropped = partitions.drop_before(engine, table.name, cut)
    return dropped, table.to_metadata(MetaData(), name=f"{table.name}_default")


def _drop_pairs(engine: Engine, chosen: Storage, cut: datetime) -> list[str]:
    """Drop the partitions of a partitioned `pairs` wholly past `cut` that hold no pair of a
    rollout still live (`_live_pairs`); an unpartitioned `pairs` keeps every row."""
    if not chosen.partitions:
        return []
    with engine.connect() as conn:
        if partitions.period_s(conn, "pairs") is None:
            return []
    return partitions.drop_before(engine, "pairs", min(cut, _live_pairs(engine, cut)))


def _live_pairs(engine: Engine, cut: datetime) -> datetime:
    """Return the oldest pair's `created_at` among live rollouts (far ahead: none), so no
    partition holding one is dropped, however long a rollout runs. Live: not ended, or
    ended after `cut`: a kill is not final (RESUME takes a killed rollout back to
    running), so an ended rollout keeps its pairs for the retention age after its end."""
    live = select(Rollout.id).where(Rollout.ended_at.is_(None) | (Rollout.ended_at > cut))
    oldest = select(func.min(Pair.created_at)).where(Pair.rollout_id.in_(live))
    with engine.connect() as conn:
        found = conn.execute(oldest).scalar()
    return found if isinstance(found, datetime) else datetime.max.replace(tzinfo=UTC)


def _delete_before(
    moment: Column[Any], key: tuple[Column[Any], ...], cut: datetime, size: int
) -> tuple[Any, int]:
    """Delete one batch of `moment`'s table's rows older than `cut`, chosen by `key`."""
    old = select(*key).where(moment < cut).limit(size)
    chosen = key[0].in_(old) if len(key) == 1 else tuple_(*key).in_(old)
    return delete(moment.table).where(chosen), size


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
