"""Assemble the span pipeline (engine, store, spool, writer) for a collector or the gateway."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from collectors.exporter import SinkSpanExporter
from collectors.metrics import CollectorMetrics
from collectors.spool import Spool
from collectors.store import SpanStore
from collectors.writer import BatchWriter, LandedCallback, WriterLimits
from gate.db import partitions, storage
from gate.db.engine import engine_from_settings
from gate.settings import CollectorSettings, Settings


@dataclass
class Pipeline:
    """A running writer and what it owns; `close` flushes or spools, then disposes the engine."""

    engine: Engine
    writer: BatchWriter
    metrics: CollectorMetrics
    shutdown_timeout_s: float

    def exporter(self) -> SinkSpanExporter:
        """Return an SDK exporter feeding this pipeline (the embedded default's span path)."""
        return SinkSpanExporter(self.writer.enqueue, flush=self.writer.flush)

    def count_default_rows(self) -> None:
        """Set the gauge of rows in each partitioned table's default partition (kept as it
        was if the query fails)."""
        if not storage.of(self.engine).partitions:
            return
        try:
            with self.engine.connect() as conn:
                held = {
                    table: partitions.default_rows(conn, table)
                    for table in partitions.LAYOUTS
                    if partitions.period_s(conn, table) is not None
                }
        except SQLAlchemyError:
            return  # the database being down is the writer's alert, not this one's
        for table, rows in held.items():
            self.metrics.default_rows.labels(table=table).set(rows)

    def close(self) -> None:
        """Stop the writer (queued spans are written or spooled) and release the engine."""
        self.writer.stop(self.shutdown_timeout_s)
        self.writer.spool.release()
        self.engine.dispose()


def open_pipeline(
    settings: Settings,
    collector: CollectorSettings | None = None,
    *,
    registry: CollectorRegistry,
    on_landed: LandedCallback | None = None,
    engine: Engine | None = None,
) -> Pipeline:
    """Build and start a writer on the settings' database, spooling in a folder it claims."""
    collector = settings if collector is None else collector
    engine = engine if engine is not None else engine_from_settings(settings)
    metrics = CollectorMetrics(registry)
    limits = WriterLimits(
        queue_max_spans=collector.collector_queue_max_spans,
        batch_max_spans=collector.collector_batch_max_spans,
        flush_interval_s=collector.collector_flush_interval_s,
        retry_initial_s=collector.collector_retry_initial_s,
        retry_max_s=collector.collector_retry_max_s,
        # A single-writer database (SQLite): a second thread would only wait on its lock.
        threads=1 if storage.of(engine).single_writer else collector.collector_writer_threads,
        group_commit=collector.collector_acknowledge == "durable",
    )
    writer = BatchWriter(
        SpanStore(engine, pair_deadline_s=settings.pair_deadline_s),
        Spool.claim(
            collector.spool_dir(settings.home), max_bytes=collector.collector_spool_max_bytes
        ),
        metrics,
        limits=limits,
        on_landed=on_landed,
    )
    writer.start()
    return Pipeline(engine, writer, metrics, collector.collector_shutdown_timeout_s)
