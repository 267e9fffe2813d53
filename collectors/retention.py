"""Retention: purge captured content after a short age, raw spans and engine samples later.

Partitioned tables (`gate.db.partitions`) lose whole partitions; unpartitioned tables and
default partitions are deleted from in batches. Pairs, generations, requests and
evaluations go only when partitioned, whole partitions past their age and older than every
row of a rollout not ended (an unpartitioned `evaluations` loses the rows of a dropped
generations partition, in batches).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import (
    Column,
    Engine,
    MetaData,
    Table,
    delete,
    null,
    select,
    text,
    tuple_,
    update,
)

from gate.db import partitions, storage
from gate.db.base import utcnow
from gate.db.engine import engine_from_settings
from gate.db.enums import Cohort
from gate.db.models import EngineSample, Generation, RequestRecord, SpanRecord
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
    # Rows of the default partitions of `pairs`, `generations`, `requests` and `evaluations`
    # past their age (not those of the generations' evaluations and ratings deleted with them).
    defaults_deleted: int = 0

    @property
    def touched(self) -> int:
        """All rows deleted or scrubbed."""
        return (
            self.spans_deleted
            + self.spans_scrubbed
            + self.generations_scrubbed
            + self.requests_scrubbed
            + self.samples_deleted
            + self.defaults_deleted
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
    pairs_cut = now - timedelta(days=settings.retention_pairs_days)
    aged = {t: _drop_aged(engine, chosen, t, pairs_cut) for t in _AGED}
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
        partitions_dropped=(*span_parts, *sample_parts, *(n for t in _AGED for n in aged[t][0])),
        defaults_deleted=sum(
            _repeat(engine, partial(_delete_default, engine, table, cut, size))
            for table in _AGED
            if (cut := aged[table][1]) is not None
        ),
    )
    log.info(
        "collector.retention_purged spans_deleted=%d spans_scrubbed=%d generations_scrubbed=%d "
        "requests_scrubbed=%d samples_deleted=%d partitions_dropped=%d defaults_deleted=%d",
        result.spans_deleted, result.spans_scrubbed, result.generations_scrubbed,
        result.requests_scrubbed, result.samples_deleted, len(result.partitions_dropped),
        result.defaults_deleted,
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


def _drop_aged(
    engine: Engine, chosen: Storage, table: str, cut: datetime
) -> tuple[list[str], datetime | None]:
    """Drop the partitions of a partitioned `pairs`, `generations`, `requests` or
    `evaluations` wholly past `cut` that hold no row of a rollout still live
    (`_oldest_live`); unpartitioned, they keep every row (evaluations too while
    `generations` is unpartitioned). Generations and requests age out
    with their pairs, evaluations with their generations. Return the partitions dropped and
    the cut taken (None: not partitioned)."""
    if not chosen.partitions:
        return [], None
    with engine.connect() as conn:
        if partitions.period_s(conn, table) is None:
            return [], None
        # Evaluations age with their generations: while `generations` is unpartitioned it
        # keeps every row, and so do they (else an ended rollout's calls outlive their
        # results, and its report, export and replayed verdict change).
        if table == "evaluations" and partitions.period_s(conn, "generations") is None:
            return [], None
    taken = min(cut, _oldest_live(engine, table, cut))
    return partitions.drop_before(engine, table, taken), taken


# Ordered so a dropped generations partition finds its evaluations' dropped already.
_AGED = ("pairs", "evaluations", "generations", "requests")


def _delete_default(engine: Engine, table: str, cut: datetime, size: int) -> tuple[Any, int]:
    """Delete one batch of `table`'s default partition's rows older than `cut`, with the
    rows naming them (`partitions.row_referrers`: a generation's evaluations and ratings).

    The default partition holds rows outside every partition (written with a time older
    than the oldest partition, or past those made ahead); it is never dropped, so its aged
    rows go in batches, as spans' do from `spans_default`.
    """
    held, column = f"{table}_default", partitions.LAYOUTS[table].column
    with engine.connect() as conn:
        referrers = partitions.row_referrers(conn, table)
    batch = f"SELECT id FROM {held} WHERE {column} < :cut ORDER BY id LIMIT :n FOR UPDATE"
    named = "".join(
        f", {other}_gone AS (DELETE FROM {other} WHERE {ref} IN (SELECT id FROM batch))"
        for other, ref in referrers
    )
    query = text(
        f"WITH batch AS ({batch}){named} DELETE FROM {held} WHERE id IN (SELECT id FROM batch)"
    ).bindparams(cut=cut, n=size)
    return query, size


# Live: not ended, or ended after the cut: a kill is not final (RESUME takes a killed
# rollout back to running), so an ended rollout keeps its rows for the retention age
# after its end.
_LIVE = "SELECT id FROM rollouts WHERE ended_at IS NULL OR ended_at > :cut"
# The oldest row of a live rollout: an index probe per partition (and cohort), on
# (rollout_id, stage, created_at) and (rollout_id, cohort, started_at).
_OLDEST_PAIR = f"SELECT min(created_at) FROM pairs WHERE rollout_id IN ({_LIVE})"
_OLDEST_GENERATION = f"""SELECT min(g.started_at) FROM ({_LIVE}) AS r
  CROSS JOIN unnest(CAST(:cohorts AS text[])) AS c(cohort)
  CROSS JOIN LATERAL (SELECT started_at FROM generations WHERE rollout_id = r.id
    AND cohort = c.cohort ORDER BY started_at LIMIT 1) AS g"""
_OLDEST = {
    "pairs": _OLDEST_PAIR,
    # A request is written from its pair's span, with the same `created_at`.
    "requests": _OLDEST_PAIR,
    "generations": _OLDEST_GENERATION,
    # An evaluation carries its generation's `started_at`.
    "evaluations": _OLDEST_GENERATION,
}


def _oldest_live(engine: Engine, table: str, cut: datetime) -> datetime:
    """Return the oldest time of `table`'s rows of live rollouts (far ahead: none), so no
    partition holding one is dropped, however long a rollout runs."""
    params = {"cut": cut, "cohorts": [c.value for c in Cohort]}
    with engine.connect() as conn:
        found = conn.execute(text(_OLDEST[table]), params).scalar()
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
    # By the whole key, so the update reads only the partitions of a partitioned table.
    key = (table.c.id, table.c.started_at)
    unscrubbed = table.c.content_purged_at.is_(None)
    old = select(*key).where(table.c.started_at < cut, unscrubbed).limit(size)
    values = {"prompt": None, "output": None, "output_extra": null(), "content_purged_at": now}
    return update(table).where(tuple_(*key).in_(old)).values(values), size


def _scrub_requests(cut: datetime, size: int) -> tuple[Any, int]:
    table = _REQUESTS
    old = select(table.c.id).where(table.c.created_at < cut, table.c.body.is_not(None)).limit(size)
    return update(table).where(table.c.id.in_(old)).values(body=null()), size
