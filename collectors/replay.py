"""Spool replay: the oldest segments, several per transaction, deleted only once committed."""

from __future__ import annotations

import logging
from collections.abc import Callable

from collectors import spool as spool_io
from collectors.metrics import CollectorMetrics
from collectors.spool import Segment, Spool
from gate.db.rows import SpanRow

log = logging.getLogger(__name__)

# Writes rows, putting spans refused even alone into the list; returns the rows left unwritten.
Store = Callable[[list[SpanRow], list[SpanRow]], list[SpanRow]]
# At most this many segments per transaction (besides about one batch of spans).
SEGMENTS_MAX = 1_000


class SpoolReplay:
    """Commits spooled spans through `store`, oldest segments first."""

    def __init__(
        self, spool: Spool, metrics: CollectorMetrics, *, store: Store, batch_max_spans: int
    ) -> None:
        self.spool = spool
        self.metrics = metrics
        self.store = store
        self.batch_max_spans = batch_max_spans

    def step(self) -> bool:
        """Replay one transaction's worth of segments; return False if none were removed."""
        segments, rows = self._gather()
        return bool(segments) and self._commit(segments, rows)

    def _gather(self) -> tuple[list[Segment], list[SpanRow]]:
        segments: list[Segment] = []
        rows: list[SpanRow] = []
        for segment in self.spool.head(SEGMENTS_MAX):
            try:
                rows += spool_io.read(segment)
            except (OSError, ValueError) as exc:
                log.error(
                    "collector.spool_corrupt segment=%s error=%r", segment.path.name, str(exc)
                )
                self.spool.quarantine(segment)
                continue
            segments.append(segment)
            if len(rows) >= self.batch_max_spans:
                break
        return segments, rows

    def _commit(self, segments: list[Segment], rows: list[SpanRow]) -> bool:
        failed: list[SpanRow] = []
        if self.store(rows, failed):
            return False  # down again; the segments stay and are retried (inserts are idempotent)
        # These spans were acknowledged: set aside for a person, never silently deleted.
        if failed and not self._quarantine(failed):
            return False
        for segment in segments:
            self.spool.remove(segment)
        self.metrics.replayed.inc(len(rows) - len(failed))
        log.info(
            "collector.spool_replayed segments=%d spans=%d first=%s",
            len(segments), len(rows), segments[0].path.name,
        )  # fmt: skip
        return True

    def _quarantine(self, rows: list[SpanRow]) -> bool:
        try:
            path = self.spool.quarantine_rows(rows)
        except OSError as exc:
            log.error("collector.quarantine_failed spans=%d error=%r", len(rows), str(exc))
            return False
        self.metrics.quarantined.inc(len(rows))
        log.error("collector.spans_quarantined spans=%d file=%s", len(rows), path)
        return True
