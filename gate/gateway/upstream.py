"""Calls to routes: JSON or SSE, timed, with failures turned into statuses, never raised.

aiohttp is the client: its connection pool stays cheap with thousands of keep-alive
connections, where httpx probes every idle socket on each request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from gate.db.enums import GenerationStatus
from gate.gateway.observe import CallResult
from gate.routing.snapshot import RouteTarget

PATHS = {"chat": "/chat/completions", "completions": "/completions"}


def upstream_url(route: RouteTarget, endpoint: str) -> str:
    """Return the route's URL for an endpoint ('chat' or 'completions')."""
    return route.base_url + PATHS[endpoint]


@dataclass
class JsonReply:
    """A complete upstream reply: status, headers that matter, raw body."""

    status_code: int
    content: bytes
    content_type: str


async def call_json(
    client: aiohttp.ClientSession,
    route: RouteTarget,
    endpoint: str,
    body: bytes,
    headers: dict[str, str],
    *,
    capture: bool,
) -> tuple[JsonReply | None, CallResult]:
    """Make a non-streaming call; a transport failure returns (None, failed result)."""
    result = CallResult()
    try:
        async with client.post(
            upstream_url(route, endpoint), data=body, headers=headers
        ) as response:
            content = await response.read()
            reply = JsonReply(response.status, content, _content_type(response))
    except TimeoutError as exc:
        return None, result.fail(GenerationStatus.TIMEOUT, f"timeout: {type(exc).__name__}")
    except aiohttp.ClientError as exc:
        return None, result.fail(GenerationStatus.ERROR, f"{type(exc).__name__}: {exc}")
    result.finish()
    result.http_status = reply.status_code
    if reply.status_code != 200:
        result.fail(GenerationStatus.ERROR, f"upstream status {reply.status_code}")
        return reply, result
    try:
        parsed = orjson.loads(reply.content)
    except orjson.JSONDecodeError:
        result.fail(GenerationStatus.ERROR, "upstream returned invalid JSON")
        return reply, result
    if not isinstance(parsed, dict):
        result.fail(GenerationStatus.ERROR, "upstream returned a non-object JSON body")
        return reply, result
    result.on_response(parsed, capture=capture)
    return reply, result


class Stream:
    """An open streaming call. Iterate `events()` to forward SSE events as they arrive."""

    def __init__(
        self, response: aiohttp.ClientResponse, result: CallResult, *, capture: bool
    ) -> None:
        self.response = response
        self.result = result
        self.capture = capture
        self.done = False

    async def events(self, *, strip_usage: bool) -> AsyncIterator[bytes]:
        """Yield, for each upstream read, the complete SSE events it finished (observed;
        usage-only chunks dropped if asked). Nothing complete is ever held back."""
        buffer = b""
        finished = False
        try:
            async for raw in self.response.content.iter_any():
                buffer += raw
                if b"\r" in buffer:
                    buffer = buffer.replace(b"\r\n", b"\n")
                *complete, buffer = buffer.split(b"\n\n")
                ready = [e + b"\n\n" for e in complete if self._observe(e) or not strip_usage]
                if ready:
                    yield b"".join(ready)
            if buffer.strip() and (self._observe(buffer) or not strip_usage):
                yield buffer
            finished = True
        except TimeoutError:
            self.result.fail(GenerationStatus.TIMEOUT, "timeout while streaming")
        except aiohttp.ClientError as exc:
            self.result.fail(GenerationStatus.ERROR, f"stream broke: {type(exc).__name__}")
        finally:
            self.result.finish()
            # Read to the end: keep the connection; abandoned: close it, which cancels
            # the generation upstream.
            if finished:
                self.response.release()
            else:
                self.response.close()

    def _observe(self, event: bytes) -> bool:
        """Account for one event; return False for a usage-only chunk (choices empty)."""
        payload = _data(event)
        if payload is None:
            return True
        if payload == b"[DONE]":
            self.done = True
            return True
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self.result.status = GenerationStatus.ERROR
            self.result.error = "upstream sent a chunk that is not JSON"
            return True
        if not isinstance(chunk, dict):
            return True
        self.result.on_chunk(chunk, capture=self.capture)
        return bool(chunk.get("choices")) or "usage" not in chunk or chunk.get("usage") is None

    async def drain(self) -> None:
        """Read the stream to the end, discarding it (the mirror's way)."""
        async for _ in self.events(strip_usage=False):
            pass


async def open_stream(
    client: aiohttp.ClientSession,
    route: RouteTarget,
    endpoint: str,
    body: bytes,
    headers: dict[str, str],
    *,
    capture: bool,
) -> tuple[Stream | JsonReply | None, CallResult]:
    """Start a streaming call. Returns the open Stream on HTTP 200, the error reply
    otherwise, or None when the route could not be reached."""
    result = CallResult()
    try:
        response = await client.post(upstream_url(route, endpoint), data=body, headers=headers)
    except TimeoutError as exc:
        return None, result.fail(GenerationStatus.TIMEOUT, f"timeout: {type(exc).__name__}")
    except aiohttp.ClientError as exc:
        return None, result.fail(GenerationStatus.ERROR, f"{type(exc).__name__}: {exc}")
    result.http_status = response.status
    if response.status == 200:
        return Stream(response, result, capture=capture), result
    try:
        content = await response.read()
    except (aiohttp.ClientError, TimeoutError):
        content = b""
    finally:
        response.release()
    result.fail(GenerationStatus.ERROR, f"upstream status {response.status}")
    return JsonReply(response.status, content, _content_type(response)), result


async def drain_call(
    client: aiohttp.ClientSession,
    route: RouteTarget,
    endpoint: str,
    body: bytes,
    headers: dict[str, str],
    *,
    stream: bool,
    capture: bool,
) -> CallResult:
    """Make a call and read it to the end, discarding the answer (mirror and control)."""
    if not stream:
        return (await call_json(client, route, endpoint, body, headers, capture=capture))[1]
    opened, result = await open_stream(client, route, endpoint, body, headers, capture=capture)
    if isinstance(opened, Stream):
        await opened.drain()
        _require_done(opened)
    return result


def _require_done(stream: Stream) -> None:
    if stream.result.status is GenerationStatus.OK and not stream.done:
        stream.result.status = GenerationStatus.ERROR
        stream.result.error = "stream ended without [DONE]"


def _data(event: bytes) -> bytes | None:
    lines = [line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def _content_type(response: aiohttp.ClientResponse) -> str:
    return str(response.headers.get("content-type", "application/json"))


def encode(body: dict[str, Any]) -> bytes:
    """Serialise a request body for upstream."""
    return orjson.dumps(body)
