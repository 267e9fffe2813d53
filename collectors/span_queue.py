"""A bounded, thread-safe queue of spans that hands them out in batches, with their receipts."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from collectors.receipt import Receipt
from gate.db.rows import SpanRow


@dataclass(slots=True)
class Batch:
    """Spans taken together, and which receipt each consecutive run of them belongs to."""

    rows: list[SpanRow] = field(default_factory=list)
    shares: list[tuple[Receipt, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def __bool__(self) -> bool:
        return bool(self.rows)

    def add(self, rows: Sequence[SpanRow], receipt: Receipt) -> None:
        """Append `rows`, owned by `receipt`."""
        self.rows.extend(rows)
        self.shares.append((receipt, len(rows)))

    def owners(self) -> Iterator[tuple[SpanRow, Receipt]]:
        """Yield each span with its receipt."""
        index = 0
        for receipt, count in self.shares:
            for row in self.rows[index : index + count]:
                yield row, receipt
            index += count


class SpanQueue:
    """Holds at most `capacity` spans; `take` waits for `min_rows` spans or a timeout."""

    def __init__(self, capacity: int, *, batch_size: int) -> None:
        self.capacity = capacity
        self.batch_size = batch_size
        self._chunks: deque[tuple[Sequence[SpanRow], Receipt]] = deque()
        self._size = 0
        self._ready = threading.Condition()
        self._wake = False

    def __len__(self) -> int:
        return self._size

    def put(self, rows: Sequence[SpanRow], receipt: Receipt, *, min_rows: int) -> bool:
        """Add all of `rows` if they fit; return False (adding nothing) if they do not."""
        with self._ready:
            if self._size + len(rows) > self.capacity:
                return False
            self._chunks.append((rows, receipt))
            self._size += len(rows)
            if self._size >= min_rows:
                self._ready.notify()
        return True

    def take(self, timeout: float, *, min_rows: int) -> Batch:
        """Return up to one batch once `min_rows` are queued, the timeout passes or `wake`."""
        deadline = time.monotonic() + timeout
        batch = Batch()
        with self._ready:
            while self._size < min_rows and not self._wake:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._ready.wait(remaining)
            self._wake = False
            while self._chunks and len(batch) < self.batch_size:
                rows, receipt = self._chunks.popleft()
                room = self.batch_size - len(batch)
                if len(rows) > room:  # the rest stays first in line
                    self._chunks.appendleft((rows[room:], receipt))
                    rows = rows[:room]
                batch.add(rows, receipt)
            self._size -= len(batch)
        return batch

    def wake(self) -> None:
        """Make a waiting `take` return now with what there is."""
        with self._ready:
            self._wake = True
            self._ready.notify_all()
