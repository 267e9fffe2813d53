"""What became of one request's spans: durable, refused for lack of room, or failed alone."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

Settled = Callable[["Receipt"], None]


class Receipt:
    """Counts a request's spans down as the writer settles them; calls `on_settled` once.

    A span is settled when it is committed to the database or fsynced into the spool
    (durable), refused because neither the queue nor the spool had room (the sender may
    retry), or failed because the database refuses it even alone (retrying cannot help).
    """

    __slots__ = ("_lock", "_on_settled", "failed", "pending", "reason", "refused", "waited")

    def __init__(self, count: int, *, on_settled: Settled | None = None) -> None:
        self._lock = threading.Lock()
        self._on_settled = on_settled
        self.pending = count
        self.refused = 0
        self.failed = 0
        self.reason: str | None = None
        # Nobody waits without a callback: the spans were acknowledged on receipt.
        self.waited = on_settled is not None
        if count == 0:
            self._finish()

    @property
    def settled(self) -> bool:
        """Whether every span has been settled."""
        return self.pending == 0

    def durable(self, count: int) -> None:
        """Settle `count` spans as committed or spooled."""
        self._settle(count)

    def refuse(self, count: int, reason: str) -> None:
        """Settle `count` spans as refused for lack of room."""
        with self._lock:
            self.refused += count
            self.reason = self.reason or (reason if count else None)
        self._settle(count)

    def fail(self, count: int, reason: str) -> None:
        """Settle `count` spans the database refused even one by one."""
        with self._lock:
            self.failed += count
            self.reason = self.reason or (reason if count else None)
        self._settle(count)

    def _settle(self, count: int) -> None:
        with self._lock:
            if count <= 0 or self.pending == 0:
                return
            self.pending = max(self.pending - count, 0)
            finished = self.pending == 0
        if finished:
            self._finish()

    def _finish(self) -> None:
        if self._on_settled is None:
            return
        try:
            self._on_settled(self)
        except Exception:  # e.g. the sender's event loop already closed: not the writer's fault
            log.exception("collector.receipt_callback_failed refused=%d", self.refused)
