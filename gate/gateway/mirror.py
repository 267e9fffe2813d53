"""A bounded pool for mirror and control calls: they can never slow the primary."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# A mirror call, given how long it waited in the queue (seconds).
MirrorCall = Callable[[float], Awaitable[None]]


class MirrorPool:
    """Runs background calls with bounded concurrency, a bounded queue and a deadline.

    A call that cannot start within the deadline is never made (`on_queue_timeout`); a
    started call gets the whole deadline from its start, so time spent in this gateway's
    queue is never charged to the route."""

    def __init__(self, *, max_concurrency: int, max_queue: int, deadline_s: float) -> None:
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self._capacity = max_concurrency + max_queue
        self._deadline_s = deadline_s
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        """Calls queued or running."""
        return len(self._tasks)

    def submit(self, call: MirrorCall, on_queue_timeout: Callable[[], None]) -> bool:
        """Start `call` in the background; return False (and do nothing) when saturated."""
        if len(self._tasks) >= self._capacity:
            return False
        task = asyncio.get_running_loop().create_task(self._run(call, on_queue_timeout))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _run(self, call: MirrorCall, on_queue_timeout: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        queued = loop.time()
        try:
            async with asyncio.timeout(self._deadline_s):
                await self._semaphore.acquire()
        except TimeoutError:
            on_queue_timeout()
            return
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
        """Cancel what is still running (shutdown)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
