"""A bounded pool for mirror and control calls: they can never slow the primary."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# A mirror call, given how long it waited in the queue (seconds).
MirrorCall = Callable[[float], Awaitable[None]]
# Told why a submitted call was never made (its deadline passed in the queue, or shutdown).
NotStarted = Callable[[str], None]

QUEUE_TIMEOUT = "mirror could not start within its deadline (gateway queue full)"
SHUTDOWN_QUEUED = "gateway shut down before the mirror started"
SHUTDOWN_RUNNING = "gateway shut down before the mirror finished"


class MirrorPool:
    """Runs background calls with bounded concurrency, a bounded queue and a deadline.

    A call that cannot start within the deadline, or before shutdown, is never made
    (`on_not_started`); a started call gets the whole deadline from its start, so time
    spent in this gateway's queue is never charged to the route. `closing` tells a call
    cancelled by shutdown from one cancelled by its deadline."""

    def __init__(self, *, max_concurrency: int, max_queue: int, deadline_s: float) -> None:
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self._capacity = max_concurrency + max_queue
        self._deadline_s = deadline_s
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    @property
    def pending(self) -> int:
        """Calls queued or running."""
        return len(self._tasks)

    @property
    def closing(self) -> bool:
        """True once shutdown began: a cancel now is the gateway's, not a deadline."""
        return self._closing

    def submit(self, call: MirrorCall, on_not_started: NotStarted) -> bool:
        """Start `call` in the background; return False (and do nothing) when saturated."""
        if len(self._tasks) >= self._capacity:
            return False
        started = asyncio.Event()
        task = asyncio.get_running_loop().create_task(self._run(call, on_not_started, started))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

        def unstarted_at_shutdown(done: asyncio.Task[None]) -> None:
            # A task cancelled before its first step never runs its body: account for it here.
            if done.cancelled() and not started.is_set():
                on_not_started(SHUTDOWN_QUEUED)

        task.add_done_callback(unstarted_at_shutdown)
        return True

    async def _run(
        self, call: MirrorCall, on_not_started: NotStarted, started: asyncio.Event
    ) -> None:
        loop = asyncio.get_running_loop()
        queued = loop.time()
        try:
            async with asyncio.timeout(self._deadline_s):
                await self._semaphore.acquire()
        except TimeoutError:
            started.set()  # accounted for here, not by the shutdown callback
            on_not_started(QUEUE_TIMEOUT)
            return
        started.set()
        try:
            # Past its deadline the call is cancelled and records its own timeout.
            async with asyncio.timeout(self._deadline_s):
                await call(loop.time() - queued)
        except TimeoutError:
            pass
        except Exception:  # a mirror bug must never surface anywhere
            log.exception("mirror_call_failed")
        finally:
            self._semaphore.release()

    async def close(self) -> None:
        """Cancel what is queued or running (shutdown); each records itself as dropped."""
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
