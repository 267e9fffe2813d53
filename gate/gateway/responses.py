"""A lean SSE response: one write per upstream read, cancelled when the client goes away."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.types import Receive, Scope, Send

HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class EventStreamResponse:
    """Forward chunks as they come; a client disconnect cancels the upstream read."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        pump = asyncio.ensure_future(self._pump(send))
        watch = asyncio.ensure_future(_disconnected(receive))
        done, _ = await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
        if pump in done:
            watch.cancel()
            pump.result()
            return
        # The client left: cancelling the pump closes the upstream stream.
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump

    async def _pump(self, send: Send) -> None:
        async for chunk in self._chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
