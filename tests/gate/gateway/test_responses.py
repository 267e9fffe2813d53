"""EventStreamResponse against an ASGI server's send/receive: the end written with the
last chunk, a client that leaves cancels the upstream read, other cancels stand."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gate.gateway.responses import EventStreamResponse


class Client:
    """The server side of one request: what was sent, and a disconnect on demand."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.left = asyncio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def receive(self) -> dict[str, Any]:
        await self.left.wait()
        return {"type": "http.disconnect"}

    def bodies(self) -> list[tuple[bytes, bool]]:
        return [(m["body"], m["more_body"]) for m in self.sent[1:]]


def test_the_end_is_written_with_the_last_chunk_when_it_is_known():
    state = {"ended": False}

    async def chunks() -> AsyncIterator[bytes]:
        yield b"a"
        state["ended"] = True
        yield b"b"

    async def run() -> Client:
        client = Client()
        response = EventStreamResponse(chunks(), ended=lambda: state["ended"])
        await response({}, client.receive, client.send)
        return client

    client = asyncio.run(run())
    assert client.sent[0]["type"] == "http.response.start"
    assert client.bodies() == [(b"a", True), (b"b", False)]


def test_without_a_known_end_the_body_is_closed_after_the_chunks():
    async def chunks() -> AsyncIterator[bytes]:
        yield b"a"

    async def run() -> Client:
        client = Client()
        await EventStreamResponse(chunks())({}, client.receive, client.send)
        return client

    assert asyncio.run(run()).bodies() == [(b"a", True), (b"", False)]


def test_a_client_that_leaves_closes_the_upstream_read():
    closed = []

    async def run() -> Client:
        client = Client()

        async def chunks() -> AsyncIterator[bytes]:
            try:
                yield b"a"
                client.left.set()
                await asyncio.sleep(3600)  # an upstream that hangs
                yield b"never"
            finally:
                closed.append(True)

        await asyncio.wait_for(EventStreamResponse(chunks())({}, client.receive, client.send), 5)
        return client

    client = asyncio.run(run())
    assert closed == [True]
    assert client.bodies() == [(b"a", True)]


def test_a_cancel_from_elsewhere_is_not_swallowed():
    async def run() -> None:
        client = Client()

        async def chunks() -> AsyncIterator[bytes]:
            yield b"a"
            await asyncio.sleep(3600)
            yield b"never"

        task = asyncio.ensure_future(EventStreamResponse(chunks())({}, client.receive, client.send))
        await asyncio.sleep(0.05)
        task.cancel()  # e.g. the server shutting down
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())


def test_a_response_that_fails_before_forwarding_releases_its_upstream():
    released = []

    async def chunks() -> AsyncIterator[bytes]:
        yield b"never asked for"

    async def broken_send(message: dict[str, Any]) -> None:
        raise OSError("the client socket is gone")

    async def run() -> None:
        response = EventStreamResponse(chunks(), abandon=lambda: released.append(True))
        with pytest.raises(OSError):
            await response({}, Client().receive, broken_send)

    asyncio.run(run())
    assert released == [True]
