"""The batch writer: bisection of bad batches, spooling, restarts, drops, shutdown."""

from __future__ import annotations

import logging
import time

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import func, select, text

from collectors.pipeline import open_pipeline
from gate.db.models import Generation, SpanRecord
from gate.settings import load_settings
from gate.telemetry import attributes as a
from tests.collectors.factory import gateway_spans

pytestmark = pytest.mark.postgres
UNREACHABLE = "postgresql+psycopg://postgres@127.0.0.1:9/nowhere"


def start(url, home, registry, **overrides):
    collector = load_settings(
        collector_flush_interval_s=0.02, collector_retry_initial_s=0.05, **overrides
    )
    return open_pipeline(load_settings(database_url=url, home=home), collector, registry=registry)


def value(registry, name):
    return registry.get_sample_value(f"specgate_collector_{name}_total")


def counts(engine):
    with engine.connect() as connection:
        spans = connection.execute(select(func.count()).select_from(SpanRecord)).scalar()
        generations = connection.execute(select(func.count()).select_from(Generation)).scalar()
    return spans, generations


def test_one_bad_span_does_not_sink_its_batch(pg_url, pg_engine, pg_ids, tmp_path, caplog):
    registry = CollectorRegistry()
    landed = []
    pipeline = start(pg_url, tmp_path, registry)
    pipeline.writer.on_landed = lambda generations, pairs: landed.extend(generations)
    spans = [row for _ in range(25) for row in gateway_spans(pg_ids)]
    spans[41].attributes[a.ROUTE_ID] = 999_999  # no such route: its generation cannot land
    spans[56].name = "x" * 300  # longer than the column, even stored raw
    with caplog.at_level(logging.ERROR, logger="collectors.writer"):
        pipeline.writer.enqueue(spans)
        assert pipeline.writer.flush(10)
    pipeline.close()
    assert counts(pg_engine) == (99, 49)
    assert value(registry, "spans_failed") == 1 and value(registry, "normalise_failed") == 1
    assert value(registry, "spans_written") == 99 and len(landed) == 49
    assert f"collector.span_failed trace_id={spans[56].trace_id}" in caplog.text


def test_spooled_batches_replay_after_a_restart(pg_url, pg_engine, pg_ids, tmp_path):
    down = CollectorRegistry()
    pipeline = start(UNREACHABLE, tmp_path, down)
    spans = [row for _ in range(10) for row in gateway_spans(pg_ids)]
    pipeline.writer.enqueue(spans[:20])
    assert pipeline.writer.flush(10)
    pipeline.writer.enqueue(spans[20:])
    pipeline.close()  # the database is still down: the queue goes to the spool
    assert value(down, "spans_spooled") == 40 and counts(pg_engine) == (0, 0)
    assert len(list((tmp_path / "spool").glob("*.spool"))) >= 2

    up = CollectorRegistry()
    pipeline = start(pg_url, tmp_path, up)
    deadline = time.monotonic() + 10
    while pipeline.writer.spool.segments and time.monotonic() < deadline:
        time.sleep(0.02)
    pipeline.close()
    assert counts(pg_engine) == (40, 20) and value(up, "spans_replayed") == 40


def test_when_queue_and_spool_are_full_drops_are_counted_and_logged(pg_ids, tmp_path, caplog):
    registry = CollectorRegistry()
    pipeline = start(
        UNREACHABLE,
        tmp_path,
        registry,
        collector_queue_max_spans=8,
        collector_spool_max_bytes=6_000,
    )
    with caplog.at_level(logging.ERROR, logger="collectors.writer"):
        dropped = sum(pipeline.writer.enqueue(gateway_spans(pg_ids)) for _ in range(20))
        pipeline.close()
    # Refused at once (queue and spool full) or later by the writer (the spool filled up).
    assert value(registry, "spans_dropped") > 0 and value(registry, "spans_dropped") >= dropped
    assert value(registry, "spans_spooled") + value(registry, "spans_dropped") == 80
    assert pipeline.writer.spool.bytes <= 6_000
    assert "collector.dropped spans=" in caplog.text


def test_a_failing_on_landed_callback_does_not_lose_or_repeat_spans(
    pg_url, pg_engine, pg_ids, tmp_path
):
    registry = CollectorRegistry()
    pipeline = start(pg_url, tmp_path, registry)

    def explode(generations, pairs):
        raise RuntimeError("pairs service down")

    pipeline.writer.on_landed = explode
    pipeline.writer.enqueue(gateway_spans(pg_ids))
    assert pipeline.writer.flush(10)
    pipeline.close()
    assert counts(pg_engine) == (4, 2) and value(registry, "spans_spooled") == 0


def test_span_values_past_the_toast_threshold_are_stored_with_lz4(
    pg_url, pg_engine, pg_ids, tmp_path
):
    with pg_engine.connect() as connection:
        methods = connection.exec_driver_sql(
            "SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'"
        ).scalar()
    if "lz4" not in (methods or []):
        pytest.skip("this Postgres has no LZ4: migration 0004 leaves it on pglz")
    pipeline = start(pg_url, tmp_path, CollectorRegistry())
    spans = gateway_spans(pg_ids)
    for span in spans:
        span.attributes["app.note"] = f"{span.span_id} a repetitive note. " * 80  # ~3 KB
    pipeline.writer.enqueue(spans)
    assert pipeline.writer.flush(10)
    pipeline.close()
    with pg_engine.connect() as connection:
        stored = connection.exec_driver_sql(
            "SELECT pg_column_compression(attributes) FROM spans WHERE span_id = ANY(%(ids)s)",
            {"ids": [span.span_id for span in spans]},
        ).scalars()
        assert list(stored) == ["lz4"] * len(spans)
        # Migrations 0004 and 0005 set every per-span column, not only the one this test filled.
        methods = connection.exec_driver_sql(
            "SELECT attrelid::regclass::text, attname, attcompression FROM pg_attribute "
            "WHERE attrelid IN ('spans'::regclass, 'requests'::regclass, "
            "'generations'::regclass) AND attcompression <> ''"
        ).all()
    lz4 = sorted(f"{table}.{column}" for table, column, method in methods if method == "l")
    assert lz4 == [
        "generations.output", "generations.output_extra", "generations.prompt",
        "requests.body", "requests.inputs", "spans.attributes", "spans.extra", "spans.resource",
    ]  # fmt: skip


def test_a_batch_aborted_by_a_deadlock_is_run_again_whole(
    pg_url, pg_engine, pg_ids, tmp_path, caplog
):
    registry = CollectorRegistry()
    pipeline = start(pg_url, tmp_path, registry, collector_writer_threads=1)
    spans = gateway_spans(pg_ids)
    first, *_, last = sorted(spans, key=lambda span: span.key)  # the writer's lock order
    hold = text(
        "INSERT INTO spans (trace_id, span_id, name, kind, start_time, end_time, status_code, "
        "attributes, resource, received_at) VALUES (:t, :s, 'other', 0, now(), now(), 0, "
        "'{}', '{}', now())"
    )
    with pg_engine.connect() as other, caplog.at_level(logging.WARNING, "collectors.writer"):
        # The writer's backend is the one to find the deadlock (1 s), not this one.
        other.execute(text("SET deadlock_timeout = '30s'"))
        other.commit()
        transaction = other.begin()
        other.execute(hold, {"t": last.trace_id, "s": last.span_id})
        pipeline.writer.enqueue(spans)
        deadline = time.monotonic() + 10
        waiting = text(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        with pg_engine.connect() as watcher:  # a fresh statistics snapshot per look
            while not watcher.execute(waiting).scalar():
                assert time.monotonic() < deadline, "the writer never waited for the held span"
                watcher.rollback()
                time.sleep(0.02)
        # Each now waits for the other: Postgres aborts the writer's transaction.
        other.execute(hold, {"t": first.trace_id, "s": first.span_id})
        transaction.rollback()
        assert pipeline.writer.flush(10)
    pipeline.close()
    assert "collector.batch_conflict attempt=1" in caplog.text
    assert counts(pg_engine) == (len(spans), 2)
    # Run again as one batch, not split into parts (or stored without its rows).
    assert value(registry, "batches") == 1 and value(registry, "normalise_failed") == 0
