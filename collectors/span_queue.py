"""A bounded, thread-safe queue of spans that hands them out in batches."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence

from collectors.spans import SpanRow


class SpanQueue:
    """Holds at most `capacity` spans; `take` waits for a full batch or a timeout."""

    def __init__(self, capacity: int, *, batch_size: int) -> None:
        self.capacity = capacity
        self.batch_size = batch_size
        self._rows: deque[SpanRow] = deque()
        self._ready = threading.Condition()
        self._wake = False

    def __len__(self) -> int:
        return len(self._rows)

    def put(self, rows: Sequence[SpanRow]) -> Sequence[SpanRow]:
        """Add what fits; return the spans that did not fit."""
        with self._ready:
            room = self.capacity - len(self._rows)
            taken = rows if len(rows) <= room else rows[: max(room, 0)]
            self._rows.extend(taken)
            if len(self._rows) >= self.batch_size:
                self._ready.notify()
        return rows[len(taken) :]

    def take(self, timeout: float) -> list[SpanRow]:
        """Return up to one batch, waiting at most `timeout` for it to fill (or a wake-up)."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while len(self._rows) < self.batch_size and not self._wake:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._ready.wait(remaining)
            self._wake = False
            count = min(self.batch_size, len(self._rows))
            return [self._rows.popleft() for _ in range(count)]

    def wake(self) -> None:
        """Make a waiting `take` return now with what there is."""
        with self._ready:
            self._wake = True
            self._ready.notify_all()
