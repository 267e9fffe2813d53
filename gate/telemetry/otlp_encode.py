"""OTLP trace export with a lean encoder: the SDK's OTLP/HTTP exporter, minus its encoder.

The SDK's encoder builds a protobuf object per attribute value and costs about 120 µs per
gateway span on these machines: as much CPU as proxying the call itself, spent in the
BatchSpanProcessor's thread under the GIL, which also shows as latency spikes while a
batch of 2,048 spans is encoded. This module writes the same `ExportTraceServiceRequest`
bytes directly, in field-number order as protobuf does (tests compare it byte for byte
with the SDK's encoder and parse it with opentelemetry-proto), and keeps the encoding of
short repeated attributes (model, route, cohort, status...) from one span to the next:
about 20 µs per span. Transport, retries, headers and compression stay the SDK's.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext

log = logging.getLogger(__name__)

_INT64 = (-(2**63), 2**63)
MAX_REQUEST_BYTES = 64 * 1024 * 1024  # the SDK exporter's default limit
# Encodings kept per attribute key: the first 64 short values of each key. Keys with
# ever-new values (request and pair ids) fill their share once and are encoded afresh.
_CACHE_KEYS = 1024
_CACHE_PER_KEY = 64
_CACHE_STR_MAX = 64
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200
_double = struct.Struct("<d").pack
_fixed64 = struct.Struct("<Q").pack
_fixed32 = struct.Struct("<I").pack


def _varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    return tag + _varint(len(payload)) + payload


def _text(tag: bytes, text: str) -> bytes:
    return _field(tag, text.encode())


def _any_value(value: Any) -> bytes:
    """Encode an AnyValue (the SDK's order of checks: bool before int)."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _text(b"\x0a", value)
    if isinstance(value, int):
        if not _INT64[0] <= value < _INT64[1]:
            raise ValueError(f"integer out of int64 range: {value}")
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + _double(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Sequence):
        return _field(b"\x2a", b"".join(_field(b"\x0a", _any_value(v)) for v in value))
    if isinstance(value, Mapping):
        pairs = b"".join(_field(b"\x0a", _key_value(str(k), v)) for k, v in value.items())
        return _field(b"\x32", pairs)
    raise TypeError(f"cannot encode a {type(value).__name__} attribute")


def _key_value(key: str, value: Any) -> bytes:
    return _text(b"\x0a", key) + _field(b"\x12", _any_value(value))


class SpanEncoder:
    """Encode SDK spans into an OTLP `ExportTraceServiceRequest`."""

    def __init__(self) -> None:
        self._cache: dict[str, dict[tuple[type, Any], bytes]] = {}
        self._names: dict[str, bytes] = {}

    def encode(self, spans: Sequence[ReadableSpan]) -> bytes:
        """Group spans by resource, then scope, as the SDK does, and encode the request."""
        groups: dict[Any, dict[Any, list[bytes]]] = {}
        # A Resource hashes through json.dumps of its attributes: find each resource
        # object's group once per call, not once per span.
        group_of: dict[int, dict[Any, list[bytes]]] = {}
        for span in spans:
            scopes = group_of.get(id(span.resource))
            if scopes is None:
                scopes = group_of[id(span.resource)] = groups.setdefault(span.resource, {})
            scopes.setdefault(span.instrumentation_scope or None, []).append(self._span(span))
        out = []
        for resource, scopes in groups.items():
            body = [_field(b"\x0a", self._attributes(b"\x0a", resource.attributes))]
            for scope, encoded in scopes.items():
                scope_spans = [_field(b"\x0a", self._scope(scope))]
                scope_spans.extend(_field(b"\x12", span) for span in encoded)
                if scope is not None and scope.schema_url:
                    scope_spans.append(_text(b"\x1a", scope.schema_url))
                body.append(_field(b"\x12", b"".join(scope_spans)))
            if resource.schema_url:
                body.append(_text(b"\x1a", resource.schema_url))
            out.append(_field(b"\x0a", b"".join(body)))
        return b"".join(out)

    def _span(self, span: ReadableSpan) -> bytes:
        context = span.get_span_context()
        assert context is not None
        parts = [
            b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),
            b"\x12\x08" + context.span_id.to_bytes(8, "big"),
        ]
        trace_state = ",".join(f"{k}={v}" for k, v in context.trace_state.items())
        if trace_state:
            parts.append(_text(b"\x1a", trace_state))
        if span.parent is not None:
            parts.append(b"\x22\x08" + span.parent.span_id.to_bytes(8, "big"))
        if span.name:
            parts.append(_text(b"\x2a", span.name))
        parts.append(b"\x30" + _varint(span.kind.value + 1))
        if span.start_time:
            parts.append(b"\x39" + _fixed64(span.start_time))
        if span.end_time:
            parts.append(b"\x41" + _fixed64(span.end_time))
        parts.append(self._attributes(b"\x4a", span.attributes))
        if span.dropped_attributes:
            parts.append(b"\x50" + _varint(span.dropped_attributes))
        for event in span.events:
            parts.append(_field(b"\x5a", self._event(event)))
        if span.dropped_events:
            parts.append(b"\x60" + _varint(span.dropped_events))
        for link in span.links:
            parts.append(_field(b"\x6a", self._link(link)))
        if span.dropped_links:
            parts.append(b"\x70" + _varint(span.dropped_links))
        parts.append(_field(b"\x7a", _status(span)))
        parts.append(b"\x85\x01" + _fixed32(_flags(span.parent)))
        return b"".join(parts)

    def _event(self, event: Any) -> bytes:
        parts = []
        if event.timestamp:
            parts.append(b"\x09" + _fixed64(event.timestamp))
        if event.name:
            parts.append(_text(b"\x12", event.name))
        parts.append(self._attributes(b"\x1a", event.attributes))
        if event.dropped_attributes:
            parts.append(b"\x20" + _varint(event.dropped_attributes))
        return b"".join(parts)

    def _link(self, link: Any) -> bytes:
        context = link.context
        parts = [
            b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),
            b"\x12\x08" + context.span_id.to_bytes(8, "big"),
            self._attributes(b"\x22", link.attributes),
        ]
        if link.dropped_attributes:
            parts.append(b"\x28" + _varint(link.dropped_attributes))
        parts.append(b"\x35" + _fixed32(_flags(context)))
        return b"".join(parts)

    def _scope(self, scope: Any) -> bytes:
        if scope is None:
            return b""
        parts = []
        if scope.name:
            parts.append(_text(b"\x0a", scope.name))
        if scope.version:
            parts.append(_text(b"\x12", scope.version))
        parts.append(self._attributes(b"\x1a", scope.attributes))
        return b"".join(parts)

    def _attributes(self, tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
        """Encode attributes as repeated KeyValue fields under `tag`; a value that cannot
        be encoded is logged and left out, as the SDK does."""
        if not attributes:
            return b""
        parts = []
        # The SDK's BoundedAttributes iterate item by item through its lock; its plain
        # dict, where it has one, is read directly (the span has ended: nothing writes).
        for key, value in getattr(attributes, "_dict", attributes).items():
            kind = type(value)
            known = None
            if kind is bool or kind is int or (kind is str and len(value) <= _CACHE_STR_MAX):
                known = self._cache.get(key)
                if known is None and len(self._cache) < _CACHE_KEYS:
                    known = self._cache[key] = {}
                hit = known.get((kind, value)) if known is not None else None
                if hit is not None:
                    parts.append(tag + hit)
                    continue
            try:
                encoded = self._key_value(key, kind, value)
            except (TypeError, ValueError, UnicodeEncodeError) as exc:
                log.error("cannot encode span attribute %s: %s", key, exc)
                continue
            if known is not None and len(known) < _CACHE_PER_KEY:
                known[(kind, value)] = encoded
            parts.append(tag + encoded)
        return b"".join(parts)

    def _key_value(self, key: str, kind: type, value: Any) -> bytes:
        """A KeyValue with its length prefix; the key's own encoding is kept. Strings and
        floats, the values that change from span to span, are written inline."""
        name = self._names.get(key)
        if name is None:
            name = _text(b"\x0a", key)
            if len(self._names) < _CACHE_KEYS:
                self._names[key] = name
        if kind is str:
            text: bytes = value.encode()
            encoded = b"\x0a" + _varint(len(text)) + text
        elif kind is float:
            encoded = b"\x21" + _double(value)
        else:
            encoded = _any_value(value)
        pair = name + b"\x12" + _varint(len(encoded)) + encoded
        return _varint(len(pair)) + pair


def _status(span: ReadableSpan) -> bytes:
    status = span.status
    message = _text(b"\x12", status.description) if status.description else b""
    code = status.status_code.value
    return message + (b"\x18" + _varint(code) if code else b"")


def _flags(parent: SpanContext | None) -> int:
    if parent is not None and parent.is_remote:
        return _HAS_IS_REMOTE | _IS_REMOTE
    return _HAS_IS_REMOTE


class LeanOTLPSpanExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP span exporter with `SpanEncoder` in place of its encoder.

    Falls back to the SDK's own export where its internals differ from the version this
    was written against (opentelemetry-exporter-otlp-proto-http 1.45)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._encoder = SpanEncoder()

    @property
    def lean(self) -> bool:
        """Whether exports take the lean encoder (the SDK's internals are as expected)."""
        return hasattr(getattr(self, "_client", None), "export")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown or not self.lean:
            return super().export(spans)
        try:
            data = self._encoder.encode(spans)
        except Exception:
            log.exception("span_encoding_failed")
            return super().export(spans)
        limit = getattr(self, "_max_request_size", MAX_REQUEST_BYTES)
        if 0 < limit < len(data):
            log.warning("span batch of %d bytes over the %d-byte limit: dropped", len(data), limit)
            return SpanExportResult.FAILURE
        result = self._client.export(data)
        return (
            SpanExportResult.SUCCESS
            if getattr(result, "success", False)
            else SpanExportResult.FAILURE
        )
