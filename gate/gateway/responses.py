"""Answering the client: a lean SSE response (one write per upstream read, cancelled when
the client goes away), and waits that end when the client does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


async def unless_disconnected(request: Request, work: Any) -> Any:
    """Await `work`; if the client disconnects first, cancel it and raise ClientGone."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request.receive))
    done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        watch.cancel()
        return task.result()
    task.cancel()
    raise ClientGone


class EventStreamResponse:
    """Forward chunks as they come; a client disconnect cancels the upstream read.

    `ended()` tells, after a chunk, whether it was the last one: the end of the body is
    then written with it, in one write instead of two. `abandon()` releases what the
    chunks hold if the response fails before the first of them is asked for."""

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        ended: Callable[[], bool] = lambda: False,
        abandon: Callable[[], None] = lambda: None,
    ) -> None:
        self._chunks = chunks
        self._ended = ended
        self._abandon = abandon

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        except BaseException:
            self._abandon()
            raise
        # The pump runs in this task; a watcher cancels it if the client leaves, which
        # closes the upstream stream (one task per response, not two and a wait).
        task = asyncio.current_task()
        assert task is not None
        gone = False

        async def watch() -> None:
            nonlocal gone
            await _disconnected(receive)
            gone = True
            task.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await self._pump(send)
        except asyncio.CancelledError:
            # Ours (the client left) is absorbed; any other cancel still stands.
            if not gone or task.uncancel() > 0:
                raise
        finally:
            watcher.cancel()

    async def _pump(self, send: Send) -> None:
        more = True
        try:
            async for chunk in self._chunks:
                if more:
                    more = not self._ended()
                    await send({"type": "http.response.body", "body": chunk, "more_body": more})
        except BaseException:
            await self._chunks.aclose()  # type: ignore[attr-defined]
            raise
        if more:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
