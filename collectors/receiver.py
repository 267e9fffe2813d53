"""OTLP/HTTP trace receiver: it only decodes requests and hands the spans to `enqueue`."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from fastapi import APIRouter, Request, Response
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)

from collectors.otlp import Decoded, MalformedPayload, decode_json, decode_protobuf
from collectors.receipt import Receipt, Settled
from gate.db.rows import SpanRow

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_PROTOBUF_TYPES = frozenset({PROTOBUF, "application/protobuf"})

# Async, so that spooling (an fsync) can be moved off the event loop.
Submit = Callable[[Sequence[SpanRow], Settled | None], Awaitable[Receipt]]


@dataclass(frozen=True, slots=True)
class Acknowledge:
    """When a success is sent: once spans are durable (or on receipt), and the 503's terms."""

    durable: bool = True
    timeout_s: float = 5.0
    retry_after_s: int = 5


class Refused(Exception):
    """A request refused as a whole, with its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def create_router(
    *,
    submit: Submit,
    max_body_bytes: int,
    token: str | None = None,
    acknowledge: Acknowledge | None = None,
    on_rejected: Callable[[int], None] | None = None,
) -> APIRouter:
    """Return a router with `POST /v1/traces`, handing decoded spans to `submit`."""
    router = APIRouter(tags=["otlp"])
    terms = acknowledge or Acknowledge()

    @router.post("/v1/traces", include_in_schema=False)
    async def export_traces(request: Request) -> Response:
        media = _media_type(request)
        try:
            _authorise(request, token)
            decoded = _decode(media, await _read_body(request, max_body_bytes))
            if decoded.rows:
                await _hand_over(decoded, submit, terms)
        except Refused as refusal:
            log.warning(
                "collector.request_refused status=%d reason=%r", refusal.status, refusal.message
            )
            headers = _refusal_headers(refusal.status, terms)
            return _status_response(media, refusal.status, refusal.message, headers)
        if decoded.rejected and on_rejected is not None:
            on_rejected(decoded.rejected)
        return _success_response(media, decoded)

    return router


async def _hand_over(decoded: Decoded, submit: Submit, terms: Acknowledge) -> None:
    """Submit the spans and, when acknowledging durable spans, wait until they are."""
    loop = asyncio.get_running_loop()
    settled: asyncio.Future[None] = loop.create_future()

    def wake(_: Receipt) -> None:
        loop.call_soon_threadsafe(_resolve, settled)

    receipt = await submit(decoded.rows, wake if terms.durable else None)
    if terms.durable:
        try:
            await asyncio.wait_for(settled, terms.timeout_s)
        except TimeoutError:
            # Still queued: the sender retries, and spans stored meanwhile are stored once.
            raise Refused(503, f"spans not durable within {terms.timeout_s:g} s") from None
    if receipt.refused:
        # Some spans may be durable already; a retry of the whole request stores them once.
        raise Refused(503, receipt.reason or "collector overloaded")
    if receipt.failed:
        decoded.rejected += receipt.failed
        decoded.error = decoded.error or receipt.reason


def _resolve(settled: asyncio.Future[None]) -> None:
    if not settled.done():  # a request that timed out has cancelled it
        settled.set_result(None)


def _refusal_headers(status: int, terms: Acknowledge) -> dict[str, str] | None:
    if status == 401:
        return {"WWW-Authenticate": "Bearer"}
    if status in (429, 503):
        return {"Retry-After": str(terms.retry_after_s)}
    return None


def _authorise(request: Request, token: str | None) -> None:
    if token is None:
        return
    # Auth schemes are case-insensitive (RFC 9110, section 11.1): "bearer x" is "Bearer x".
    scheme, _, credentials = request.headers.get("authorization", "").strip().partition(" ")
    matches = hmac.compare_digest(credentials.strip().encode(), token.encode())
    if scheme.lower() != "bearer" or not matches:
        raise Refused(401, "missing or wrong bearer token")


def _media_type(request: Request) -> str:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return PROTOBUF if media in _PROTOBUF_TYPES else media


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Refused(413, f"body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding == "gzip":
        return _gunzip(body, limit)
    if encoding not in ("identity", ""):
        raise Refused(415, f"unsupported Content-Encoding {encoding!r}; use gzip or none")
    return body


def _gunzip(body: bytes, limit: int) -> bytes:
    """Inflate every member of a gzip body (RFC 1952 allows several); refuse anything after."""
    members: list[bytes] = []
    size = 0
    rest = body
    while True:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = inflater.decompress(rest, limit - size + 1)
        except zlib.error as exc:
            raise Refused(400, f"body is not valid gzip: {exc}") from None
        size += len(data)
        if size > limit or inflater.unconsumed_tail:
            raise Refused(413, f"decompressed body exceeds the limit of {limit} bytes")
        if not inflater.eof:
            raise Refused(400, "gzip body is truncated")
        members.append(data)
        rest = inflater.unused_data
        if not rest:
            return b"".join(members)
        if not rest.startswith(b"\x1f\x8b"):
            raise Refused(400, f"{len(rest)} bytes of garbage after the last gzip member")


def _decode(media: str, body: bytes) -> Decoded:
    try:
        if media == PROTOBUF:
            return decode_protobuf(body)
        if media == JSON:
            return decode_json(body)
    except MalformedPayload as exc:
        raise Refused(400, str(exc)) from None
    raise Refused(415, f"unsupported Content-Type {media!r}; use {PROTOBUF} or {JSON}")


def _success_response(media: str, decoded: Decoded) -> Response:
    reply = ExportTraceServiceResponse()
    if decoded.rejected:
        reply.partial_success.rejected_spans = decoded.rejected
        reply.partial_success.error_message = decoded.error or "some spans were rejected"
    if media == JSON:
        # OTLP/JSON: lowerCamelCase, int64 as a string, an empty object for full success.
        partial = (
            {
                "rejectedSpans": str(decoded.rejected),
                "errorMessage": reply.partial_success.error_message,
            }
            if decoded.rejected
            else None
        )
        body = json.dumps({"partialSuccess": partial} if partial else {})
        return Response(body, media_type=JSON)
    return Response(reply.SerializeToString(), media_type=PROTOBUF)


def _status_response(
    media: str, status: int, message: str, headers: dict[str, str] | None
) -> Response:
    if media == JSON:
        body = json.dumps({"code": status, "message": message})
        return Response(body, status_code=status, media_type=JSON, headers=headers)
    return Response(
        _status_proto(message), status_code=status, media_type=PROTOBUF, headers=headers
    )


def _status_proto(message: str) -> bytes:
    """A `google.rpc.Status` with only its message, as OTLP asks for errors."""
    body: bytes = Status(message=message).SerializeToString()
    return body
