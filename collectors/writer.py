"""The batch writer: threads drain the queue, one transaction per batch, spooling on outage."""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collectors.metrics import CollectorMetrics
from collectors.receipt import Receipt, Settled
from collectors.replay import SpoolReplay
from collectors.span_queue import Batch, SpanQueue
from collectors.spans import scrub
from collectors.spool import Spool
from collectors.store import Landed, SpanStore, is_conflict, is_data_error
from gate.db.rows import SpanRow

log = logging.getLogger(__name__)

LandedCallback = Callable[[list[int], list[uuid.UUID]], None]

_CONFLICT_RETRIES = 4
# How a span that fails in its batch is tried alone: as is, without NUL, then raw only.
_AS_IS, _SCRUBBED, _RAW = 0, 1, 2
OVERLOADED = "collector overloaded: queue and spool are full"


@dataclass(frozen=True, slots=True)
class WriterLimits:
    """Bounds and timings of a writer."""

    queue_max_spans: int = 100_000
    batch_max_spans: int = 5_000
    flush_interval_s: float = 0.2
    retry_initial_s: float = 0.5
    retry_max_s: float = 10.0
    # Two threads overlap one batch's Python work with the other's database round trips.
    threads: int = 2
    # Group commit: a free thread takes whatever is queued at once, because every queued
    # span has a sender waiting for it to be durable. Off, a thread waits up to
    # `flush_interval_s` for a full batch (spans acknowledged on receipt).
    group_commit: bool = True


class BatchWriter:
    """Owns the span queue and the threads that write it to the store, or else to the spool."""

    def __init__(
        self,
        store: SpanStore,
        spool: Spool,
        metrics: CollectorMetrics,
        *,
        limits: WriterLimits | None = None,
        on_landed: LandedCallback | None = None,
    ) -> None:
        self.store = store
        self.spool = spool
        self.metrics = metrics
        self.limits = limits or WriterLimits()
        self.on_landed = on_landed
        self.queue = SpanQueue(self.limits.queue_max_spans, batch_size=self.limits.batch_max_spans)
        self.database_up = True
        self._retry_at = 0.0
        self._backoff = self.limits.retry_initial_s
        self._stopping = threading.Event()
        self._spool_full = False
        self._stop_deadline = 0.0
        self._threads: list[threading.Thread] = []
        self._replayer = SpoolReplay(
            spool, metrics, store=self._store, batch_max_spans=self.limits.batch_max_spans
        )
        # Spans accepted by `enqueue` and spans fully handled, for `flush`.
        self._progress = threading.Condition()
        self._accepted = 0
        self._handled = 0
        self._publish()

    def start(self) -> None:
        """Start the writer threads."""
        for index in range(self.limits.threads):
            thread = threading.Thread(
                target=self._run, args=(index == 0,), name=f"specgate-span-writer-{index}"
            )
            thread.daemon = True
            thread.start()
            self._threads.append(thread)
        log.info(
            "collector.writer_started threads=%d spool=%s", self.limits.threads, self.spool.folder
        )

    def enqueue(self, rows: Sequence[SpanRow]) -> int:
        """Queue spans nobody waits for; return how many could be neither queued nor spooled."""
        return self.submit(rows).refused

    def submit(self, rows: Sequence[SpanRow], *, on_settled: Settled | None = None) -> Receipt:
        """Queue spans (spooling them if the queue is full); `on_settled` runs once every
        span is durable, refused for lack of room, or failed."""
        receipt, overflow = self.offer(rows, on_settled=on_settled)
        if overflow is not None:
            self.spill(overflow)
        return receipt

    def offer(
        self, rows: Sequence[SpanRow], *, on_settled: Settled | None = None
    ) -> tuple[Receipt, Batch | None]:
        """Queue spans without blocking; return the batch to `spill` if the queue is full."""
        receipt = Receipt(len(rows), on_settled=on_settled)
        if not rows:
            return receipt, None
        self.metrics.received.inc(len(rows))
        queued = not self._stopping.is_set() and self.queue.put(
            rows, receipt, min_rows=self._min_rows
        )
        self.metrics.queue_depth.set(len(self.queue))
        if queued:
            with self._progress:
                self._accepted += len(rows)
            return receipt, None
        overflow = Batch()
        overflow.add(rows, receipt)
        return receipt, overflow

    def spill(self, overflow: Batch) -> None:
        """Spool spans the queue had no room for (blocking: an fsync, behind the spool's lock)."""
        self._keep(overflow, reason="shutdown" if self._stopping.is_set() else "queue_full")

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every span queued so far is stored or spooled; return False on timeout."""
        deadline = time.monotonic() + timeout
        with self._progress:
            target = self._accepted
            self.queue.wake()
            while self._handled < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._progress.wait(min(remaining, 0.05))
                self.queue.wake()
        return True

    def stop(self, timeout: float = 30.0) -> None:
        """Write what is queued within `timeout`, spool the rest, and stop the threads."""
        self._stop_deadline = time.monotonic() + timeout
        self._stopping.set()
        self.queue.wake()
        for thread in self._threads:
            thread.join(max(self._stop_deadline - time.monotonic(), 0) + 5.0)
        # Spans that raced in while the thread was finishing.
        while leftover := self.queue.take(0, min_rows=0):
            self._keep(leftover, reason="shutdown")
        log.info("collector.writer_stopped spool_bytes=%d", self.spool.bytes)

    def _publish(self) -> None:
        # Set values, not callbacks: under `specgate collect --workers N` every worker's
        # gauges are read from files by whichever worker answers /metrics.
        self.metrics.queue_depth.set(len(self.queue))
        self.metrics.spool_bytes.set(self.spool.bytes)
        self.metrics.database_up.set(1 if self.database_up else 0)

    def _run(self, replays: bool) -> None:
        # One thread replays the spool, so segments land in the order they were written.
        while True:
            batch = self.queue.take(self.limits.flush_interval_s, min_rows=self._min_rows)
            self._publish()  # at least every flush interval
            stopping = self._stopping.is_set()
            if replays and not stopping:
                try:
                    self._replay()
                except Exception:  # a bug must not stop the writer thread
                    log.exception("collector.replay_error")
            if batch:
                late = stopping and time.monotonic() > self._stop_deadline
                self._deliver(batch, spool_only=late)
            if not batch and stopping and not len(self.queue):
                return

    @property
    def _min_rows(self) -> int:
        return 1 if self.limits.group_commit else self.limits.batch_max_spans

    def _deliver(self, batch: Batch, *, spool_only: bool) -> None:
        try:
            if spool_only or not self._may_try():
                self._keep(batch, reason="database_down" if not spool_only else "shutdown")
                return
            failed: list[SpanRow] = []
            try:
                leftover = self._store(batch.rows, failed)
            except Exception:  # a bug must not stop the writer: keep the spans for a replay
                log.exception("collector.writer_error spans=%d", len(batch))
                self._keep(batch, reason="writer_error")
                return
            self._settle(batch, leftover, failed)
        finally:
            with self._progress:
                self._handled += len(batch)
                self._progress.notify_all()

    def _settle(self, batch: Batch, leftover: list[SpanRow], failed: list[SpanRow]) -> None:
        """Tell each receipt what became of its spans in `batch`."""
        if not leftover and not failed:
            for receipt, count in batch.shares:
                receipt.durable(count)
            return
        # Kept whole: the database is down, or the batch still deadlocked.
        reason = "database_down" if not self.database_up else "conflict"
        spooled = self._spool(leftover, reason=reason) if leftover else True
        left, bad = {id(row) for row in leftover}, {id(row) for row in failed}
        durable: Counter[Receipt] = Counter()
        refused: Counter[Receipt] = Counter()
        for row, receipt in batch.owners():
            if id(row) in bad:
                receipt.fail(1, "the database refuses this span even alone")
            elif id(row) in left and not spooled:
                refused[receipt] += 1
            else:
                durable[receipt] += 1
        for receipt, count in durable.items():
            receipt.durable(count)
        for receipt, count in refused.items():
            self._refuse(receipt, count)

    def _keep(self, batch: Batch, *, reason: str) -> None:
        """Spool a batch; settle its receipts as durable, or refused when it does not fit."""
        spooled = self._spool(batch.rows, reason=reason)
        for receipt, count in batch.shares:
            if spooled:
                receipt.durable(count)
            else:
                self._refuse(receipt, count)

    def _refuse(self, receipt: Receipt, count: int) -> None:
        # A waiting sender hears 503 and retries; spans acknowledged on receipt are lost.
        if receipt.waited:
            self.metrics.refused.inc(count)
        else:
            self.metrics.dropped.inc(count)
            log.error("collector.dropped spans=%d queue=%d", count, len(self.queue))
        receipt.refuse(count, OVERLOADED)

    def _replay(self) -> None:
        # One run per turn even under load; then on while nothing is queued, so an idle
        # collector empties the spool at batch speed rather than a few segments a turn.
        while self._may_try() and not self._stopping.is_set():
            if not self._replayer.step() or len(self.queue):
                return

    def _may_try(self) -> bool:
        return self.database_up or time.monotonic() >= self._retry_at

    def _store(self, rows: list[SpanRow], failed: list[SpanRow]) -> list[SpanRow]:
        """Write rows, splitting failing batches (spans refused alone go to `failed`); return
        the rows left when the database is down."""
        pending: list[tuple[list[SpanRow], int]] = [(rows, _AS_IS)]
        while pending:
            part, stage = pending.pop()
            try:
                written = part if stage == _AS_IS else [self._scrubbed(part[0])]
                landed = self._write(written, full=stage != _RAW)
            except Exception as exc:
                if not is_data_error(exc):
                    # Not the rows' fault (an outage, a read-only failover, a revoked grant, a
                    # deadlock still repeating): kept whole for a replay, never failed.
                    if not is_conflict(exc):
                        self._went_down(exc)
                    return part + [row for rest, _ in reversed(pending) for row in rest]
                pending.extend(self._split(part, stage, exc, failed))
                continue
            self._came_up()
            self._landed(landed, raw_only=stage == _RAW)
        return []

    def _scrubbed(self, row: SpanRow) -> SpanRow:
        clean, removed = scrub(row)
        if removed:
            # Postgres text and JSONB cannot hold NUL: removed, counted, and said on the span.
            self.metrics.nul_removed.inc(removed)
            log.warning(
                "collector.nul_removed trace_id=%s span_id=%s count=%d",
                row.trace_id, row.span_id, removed,
            )  # fmt: skip
        return clean

    def _write(self, rows: list[SpanRow], *, full: bool) -> Landed:
        for attempt in range(_CONFLICT_RETRIES):
            try:
                with self.metrics.batch_seconds.time():
                    return self.store.write(rows, normalise_rows=full)
            except Exception as exc:
                # Two writers taking the same rows (a retried export) can deadlock; the
                # database aborts one, which is simply run again.
                if not is_conflict(exc) or attempt == _CONFLICT_RETRIES - 1:
                    raise
                log.warning("collector.batch_conflict attempt=%d spans=%d", attempt + 1, len(rows))
                # Apart again before the next try, so the two writers stop meeting.
                time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))
        raise AssertionError("unreachable")

    def _split(
        self, part: list[SpanRow], stage: int, exc: Exception, failed: list[SpanRow]
    ) -> list[tuple[list[SpanRow], int]]:
        if len(part) > 1:
            middle = len(part) // 2
            return [(part[middle:], _AS_IS), (part[:middle], _AS_IS)]
        if stage != _RAW:
            # Alone, without NUL characters; then the raw span even if its rows cannot land.
            return [(part, stage + 1)]
        self.metrics.failed.inc()
        failed.append(part[0])
        log.error(
            "collector.span_failed trace_id=%s span_id=%s error=%r",
            part[0].trace_id, part[0].span_id, _first_line(exc),
        )  # fmt: skip
        return []

    def _landed(self, landed: Landed, *, raw_only: bool) -> None:
        self.metrics.batches.inc()
        self.metrics.written.inc(landed.spans_new)
        self.metrics.duplicate.inc(landed.spans_duplicate)
        self.metrics.generations.inc(len(landed.generation_ids))
        if raw_only or landed.normalise_skipped:
            self.metrics.normalise_failed.inc(1 if raw_only else landed.normalise_skipped)
        if landed.fields_dropped:
            self.metrics.fields_dropped.inc(landed.fields_dropped)
        if self.on_landed is not None and (landed.generation_ids or landed.pair_ids):
            try:
                self.on_landed(landed.generation_ids, landed.pair_ids)
            except Exception:
                log.exception(
                    "collector.on_landed_failed generations=%d", len(landed.generation_ids)
                )

    def _spool(self, rows: Sequence[SpanRow], *, reason: str) -> bool:
        try:
            stored = self.spool.append(rows)
        except OSError as exc:
            log.error("collector.spool_write_failed error=%r", str(exc))
            stored = False
        if stored:
            self.metrics.spooled.inc(len(rows))
            # During an outage every batch is spooled: `database_down` said so once already.
            level = logging.DEBUG if reason == "database_down" else logging.WARNING
            log.log(level, "collector.spooled spans=%d reason=%s", len(rows), reason)
            if self._spool_full:
                self._spool_full = False
                log.info("collector.spool_has_room spool_bytes=%d", self.spool.bytes)
            return True
        if not self._spool_full:  # once per change of state; spans_refused_total counts them
            log.error(
                "collector.spool_full spans=%d reason=%s queue=%d spool_bytes=%d",
                len(rows), reason, len(self.queue), self.spool.bytes,
            )  # fmt: skip
        self._spool_full = True
        return False

    def _went_down(self, exc: Exception) -> None:
        if self.database_up:
            log.error("collector.database_down error=%r", _first_line(exc))
        else:
            self._backoff = min(self._backoff * 2, self.limits.retry_max_s)
        self.database_up = False
        self._retry_at = time.monotonic() + self._backoff

    def _came_up(self) -> None:
        if not self.database_up:
            log.info("collector.database_up")
        self.database_up = True
        self._backoff = self.limits.retry_initial_s


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
