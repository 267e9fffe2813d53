"""Prometheus metrics of the span pipeline, registered on a registry the caller owns."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_BATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class CollectorMetrics:
    """Counters, gauges and the batch-latency histogram of one writer."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.received = self._counter("spans_received", "Spans handed to the writer.")
        self.written = self._counter("spans_written", "Spans newly stored.")
        self.duplicate = self._counter("spans_duplicate", "Spans already stored (ignored).")
        self.failed = self._counter("spans_failed", "Spans refused by the database, alone.")
        self.spooled = self._counter("spans_spooled", "Spans written to the on-disk spool.")
        self.replayed = self._counter("spans_replayed", "Spooled spans committed on replay.")
        self.quarantined = self._counter(
            "spans_quarantined", "Spooled spans refused alone on replay, set aside in .bad files."
        )
        self.dropped = self._counter(
            "spans_dropped", "Spans acknowledged on receipt, then lost: queue and spool full."
        )
        self.refused = self._counter(
            "spans_refused", "Spans refused with 503 (sender retries): queue and spool full."
        )
        self.rejected = self._counter("spans_rejected", "Spans refused by the receiver.")
        self.normalise_failed = self._counter(
            "normalise_failed", "Spans stored raw because their rows could not be written."
        )
        self.fields_dropped = self._counter(
            "fields_dropped",
            "Malformed span attributes left out of their rows (the stored span keeps them).",
        )
        self.nul_removed = self._counter(
            "nul_removed", "NUL characters removed from spans (Postgres cannot store them)."
        )
        self.generations = self._counter("generations_landed", "New generation rows.")
        self.batches = self._counter("batches", "Batches committed.")
        # With several workers (multiprocess mode): queue and spool summed over the live
        # workers, the database up only while every worker can write to it.
        self.queue_depth = Gauge(
            "specgate_collector_queue_depth",
            "Spans waiting in the queue.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.spool_bytes = Gauge(
            "specgate_collector_spool_bytes",
            "Bytes held by the spool.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.database_up = Gauge(
            "specgate_collector_database_up",
            "1 while the database takes writes.",
            registry=registry,
            multiprocess_mode="livemin",
        )
        # Rows no time partition holds (`gate.db.partitions`), per partitioned table:
        # counted when /metrics is read; retention deletes them once past their age.
        self.default_rows = Gauge(
            "specgate_collector_default_rows",
            "Rows in the default partition of a time-partitioned table (0: none).",
            ["table"],
            registry=registry,
            multiprocess_mode="max",
        )
        self.batch_seconds = Histogram(
            "specgate_collector_batch_seconds",
            "Time to write one batch (one transaction).",
            buckets=_BATCH_BUCKETS,
            registry=registry,
        )

    def _counter(self, name: str, documentation: str) -> Counter:
        return Counter(f"specgate_collector_{name}_total", documentation, registry=self.registry)
