"""Calls to routes: JSON or SSE, timed, with failures turned into statuses, never raised."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from gate.db.enums import GenerationStatus
from gate.gateway.observe import CallResult
from gate.routing.snapshot import RouteTarget

PATHS = {"chat": "/chat/completions", "completions": "/completions"}
_SEPARATORS = (b"\r\n\r\n", b"\n\n")


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
    client: httpx.AsyncClient,
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
        response = await client.post(upstream_url(route, endpoint), content=body, headers=headers)
    except httpx.TimeoutException as exc:
        return None, result.fail(GenerationStatus.TIMEOUT, f"timeout: {type(exc).__name__}")
    except httpx.HTTPError as exc:
        return None, result.fail(GenerationStatus.ERROR, f"{type(exc).__name__}: {exc}")
    result.finish()
    result.http_status = response.status_code
    reply = JsonReply(response.status_code, response.content, _content_type(response))
    if response.status_code != 200:
        result.fail(GenerationStatus.ERROR, f"upstream status {response.status_code}")
        return reply, result
    try:
        parsed = orjson.loads(response.content)
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

    def __init__(self, response: httpx.Response, result: CallResult, *, capture: bool) -> None:
        self.response = response
        self.result = result
        self.capture = capture
        self.done = False

    async def events(self, *, strip_usage: bool) -> AsyncIterator[bytes]:
        """Yield complete SSE events; observe each; drop usage-only chunks if asked."""
        buffer = b""
        try:
            async for raw in self.response.aiter_raw():
                buffer += raw
                while True:
                    event, buffer = _split_event(buffer)
                    if event is None:
                        break
                    if self._observe(event) or not strip_usage:
                        yield event
            if buffer.strip() and (self._observe(buffer) or not strip_usage):
                yield buffer
        except httpx.TimeoutException:
            self.result.fail(GenerationStatus.TIMEOUT, "timeout while streaming")
        except httpx.HTTPError as exc:
            self.result.fail(GenerationStatus.ERROR, f"stream broke: {type(exc).__name__}")
        finally:
            self.result.finish()
            await self.response.aclose()

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
    client: httpx.AsyncClient,
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
    request = client.build_request(
        "POST", upstream_url(route, endpoint), content=body, headers=headers
    )
    try:
        response = await client.send(request, stream=True)
    except httpx.TimeoutException as exc:
        return None, result.fail(GenerationStatus.TIMEOUT, f"timeout: {type(exc).__name__}")
    except httpx.HTTPError as exc:
        return None, result.fail(GenerationStatus.ERROR, f"{type(exc).__name__}: {exc}")
    result.http_status = response.status_code
    if response.status_code == 200:
        return Stream(response, result, capture=capture), result
    try:
        content = await response.aread()
    except httpx.HTTPError:
        content = b""
    finally:
        await response.aclose()
    result.fail(GenerationStatus.ERROR, f"upstream status {response.status_code}")
    return JsonReply(response.status_code, content, _content_type(response)), result


async def drain_call(
    client: httpx.AsyncClient,
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


def _split_event(buffer: bytes) -> tuple[bytes | None, bytes]:
    positions = [(buffer.find(sep), sep) for sep in _SEPARATORS]
    found = [(pos, sep) for pos, sep in positions if pos >= 0]
    if not found:
        return None, buffer
    pos, sep = min(found)
    end = pos + len(sep)
    return buffer[:end], buffer[end:]


def _data(event: bytes) -> bytes | None:
    lines = [line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def _content_type(response: httpx.Response) -> str:
    return str(response.headers.get("content-type", "application/json"))


def upstream_headers(traceparent: dict[str, str]) -> dict[str, str]:
    """Return the headers of an upstream call: JSON, plus trace context."""
    return {"content-type": "application/json", "accept": "application/json", **traceparent}


def encode(body: dict[str, Any]) -> bytes:
    """Serialise a request body for upstream."""
    return orjson.dumps(body)


@contextlib.asynccontextmanager
async def counted(inflight: dict[int, int], route_id: int) -> AsyncIterator[None]:
    """Count a call in flight on a route for as long as the block runs."""
    inflight[route_id] = inflight.get(route_id, 0) + 1
    try:
        yield
    finally:
        inflight[route_id] -= 1
