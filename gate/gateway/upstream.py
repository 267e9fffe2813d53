"""Calls to routes: JSON or SSE, timed, with failures turned into statuses, never raised."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from gate.db.enums import GenerationStatus
from gate.gateway import logprobs, sse
from gate.gateway.observe import CallResult
from gate.gateway.transport import (
    ConnectTimeout,
    Transport,
    Unreachable,
    UpstreamError,
    UpstreamResponse,
)
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


FIRST_BYTE_TIMEOUT = "no first byte within the canary timeout"


class _NoHead(TimeoutError):
    """The canary's first-byte deadline passed before the response head came."""


async def _post(
    client: Transport, url: str, body: bytes, headers: dict[str, str], head_by: float | None
) -> UpstreamResponse:
    """POST and wait for the response head; `head_by` (event-loop time) bounds connect,
    write and head together (_NoHead when that bound, not the upstream timeout, ran out)."""
    if head_by is None:
        return await client.post(url, body, headers)
    bound = asyncio.timeout_at(head_by)
    try:
        async with bound:
            return await client.post(url, body, headers)
    except TimeoutError:
        if bound.expired():
            raise _NoHead from None
        raise


def _unsent(result: CallResult, exc: UpstreamError) -> CallResult:
    """A call that failed before a response head: unreachable when no connection opened."""
    result.unreachable = isinstance(exc, Unreachable)
    return result.fail(GenerationStatus.ERROR, str(exc))


def _timed_out(result: CallResult, exc: TimeoutError) -> CallResult:
    # Only a deadline that ran out before the head is a first-byte timeout; one while
    # reading the body comes after the first byte.
    if isinstance(exc, _NoHead):
        return result.fail(GenerationStatus.TIMEOUT, FIRST_BYTE_TIMEOUT)
    result.unreachable = isinstance(exc, ConnectTimeout)
    return result.fail(GenerationStatus.TIMEOUT, f"timeout: {exc}")


async def call_json(
    client: Transport,
    route: RouteTarget,
    endpoint: str,
    body: bytes,
    headers: dict[str, str],
    *,
    capture: bool,
    result: CallResult | None = None,
    head_by: float | None = None,
    unasked: bytes | None = None,
) -> tuple[JsonReply | None, CallResult]:
    """Make a non-streaming call; a transport failure returns (None, failed result).
    `head_by` (event-loop time) bounds the wait for the response head, not the body;
    `unasked` is the body without the logprobs we added, sent if the route rejects them."""
    result = result or CallResult()
    try:
        response = await _post(client, upstream_url(route, endpoint), body, headers, head_by)
        content = await response.read()
        reply = JsonReply(response.status, content, _content_type(response))
    except TimeoutError as exc:
        return None, _timed_out(result, exc)
    except UpstreamError as exc:
        return None, _unsent(result, exc)
    result.finish()
    result.http_status = reply.status_code
    if unasked is not None and reply.status_code in logprobs.REJECTIONS:
        result.retry_without_logprobs()
        again = (client, route, endpoint, unasked, headers)
        return await call_json(*again, capture=capture, result=result, head_by=head_by)
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

    def __init__(self, response: UpstreamResponse, result: CallResult, *, capture: bool) -> None:
        self.response = response
        self.result = result
        self.capture = capture
        self.done = False
        # True when what was yielded last is the end of the answer.
        self.ended = False

    async def events(
        self, *, strip_usage: bool, strip_logprobs: bool = False
    ) -> AsyncIterator[bytes]:
        """Yield, for each upstream read, the complete SSE events it finished (observed;
        usage-only chunks dropped and logprobs nulled if asked). Nothing complete is ever
        held back."""
        buffer = b""
        finished = False
        try:
            async for raw in self.response.chunks():
                complete, buffer = sse.split_complete(sse.normalise(buffer + raw))
                if not complete:
                    continue
                ready = self._complete(complete, strip_usage=strip_usage)
                if strip_logprobs:
                    ready = logprobs.strip_events(ready)
                if ready:
                    self.ended = self.response.at_end and not buffer
                    yield ready
            if buffer.strip() and (
                self._observe(sse.event_data(buffer), time.perf_counter()) or not strip_usage
            ):
                self.ended = True
                yield logprobs.strip_events(buffer) if strip_logprobs else buffer
            finished = True
        except TimeoutError:
            self.result.fail(GenerationStatus.TIMEOUT, "timeout while streaming")
        except UpstreamError as exc:
            self.result.fail(GenerationStatus.ERROR, f"stream broke: {exc}")
        finally:
            self.result.finish()
            # Read to the end: keep the connection; abandoned: close it, which cancels
            # the generation upstream.
            if finished:
                self.response.release()
            else:
                self.response.close()

    def _complete(self, events: bytes, *, strip_usage: bool) -> bytes:
        """Observe complete events (ending in a blank line); return what to forward:
        the events as they came, unless a usage-only chunk is dropped."""
        now = time.perf_counter()
        if strip_usage and sse.USAGE_KEY in events:
            # What the gateway asked for on the client's behalf leaves no trace.
            events = sse.strip_null_usage(events)
        plain = sse.parse_plain(events)
        if plain is None:
            split = sse.split_events(events)
            keep = [self._observe(sse.event_data(event), now) for event in split]
        else:
            chunks, done = plain
            self.done = self.done or done
            self.result.on_chunks(chunks, now, capture=self.capture)
            if not strip_usage or sse.USAGE_KEY not in events:
                return events
            keep = [_kept(chunk) for chunk in chunks]
            if all(keep):
                return events
            if keep.index(False) == len(chunks) - 1:  # the usual: usage comes last
                return sse.without_last_object(events)
            split = sse.split_events(events)
            keep += [True] * (len(split) - len(chunks))  # the end marker
        if not strip_usage or all(keep):
            return events
        return sse.join_events([event for event, kept in zip(split, keep, strict=True) if kept])

    def _observe(self, payload: bytes | None, now: float) -> bool:
        """Account for one event's data; return False for a usage-only chunk."""
        if payload is None:
            return True
        if sse.is_done(payload):
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
        self.result.on_chunks([chunk], now, capture=self.capture)
        return _kept(chunk)

    async def drain(self) -> None:
        """Read the stream to the end, discarding it (the mirror's way)."""
        async for _ in self.events(strip_usage=False):
            pass


async def open_stream(
    client: Transport,
    route: RouteTarget,
    endpoint: str,
    body: bytes,
    headers: dict[str, str],
    *,
    capture: bool,
    result: CallResult | None = None,
    head_by: float | None = None,
    unasked: bytes | None = None,
) -> tuple[Stream | JsonReply | None, CallResult]:
    """Start a streaming call. Returns the open Stream on HTTP 200, the error reply
    otherwise, or None when the route could not be reached (or sent no head by `head_by`).
    `unasked` is the body without the logprobs we added, sent if the route rejects them."""
    result = result or CallResult()
    try:
        response = await _post(client, upstream_url(route, endpoint), body, headers, head_by)
    except TimeoutError as exc:
        return None, _timed_out(result, exc)
    except UpstreamError as exc:
        return None, _unsent(result, exc)
    result.http_status = response.status
    if response.status == 200:
        return Stream(response, result, capture=capture), result
    try:
        content = await response.read()
    except (UpstreamError, TimeoutError):
        content = b""
    if unasked is not None and response.status in logprobs.REJECTIONS:
        result.retry_without_logprobs()
        again = (client, route, endpoint, unasked, headers)
        return await open_stream(*again, capture=capture, result=result, head_by=head_by)
    result.fail(GenerationStatus.ERROR, f"upstream status {response.status}")
    return JsonReply(response.status, content, _content_type(response)), result


async def drain_call(
    client: Transport,
    route: RouteTarget,
    endpoint: str,
    body: bytes,
    headers: dict[str, str],
    *,
    stream: bool,
    capture: bool,
    unasked: bytes | None = None,
) -> CallResult:
    """Make a call and read it to the end, discarding the answer (mirror and control);
    `unasked` as for `call_json`."""
    call = (client, route, endpoint, body, headers)
    if not stream:
        return (await call_json(*call, capture=capture, unasked=unasked))[1]
    opened, result = await open_stream(*call, capture=capture, unasked=unasked)
    if isinstance(opened, Stream):
        await opened.drain()
        _require_done(opened)
    return result


def _require_done(stream: Stream) -> None:
    if stream.result.status is GenerationStatus.OK and not stream.done:
        stream.result.status = GenerationStatus.ERROR
        stream.result.error = "stream ended without [DONE]"


def _kept(chunk: dict[str, Any]) -> bool:
    """False for a usage-only chunk (no choices), which a client that did not ask for
    usage must not see."""
    return bool(chunk.get("choices")) or chunk.get("usage") is None


def _content_type(response: UpstreamResponse) -> str:
    return response.headers.get("content-type", "application/json")


def encode(body: dict[str, Any]) -> bytes:
    """Serialise a request body for upstream."""
    return orjson.dumps(body)
