"""OTLP trace export with a lean encoder: the SDK's OTLP/HTTP exporter, minus its encoder.

The SDK's encoder builds a protobuf object per attribute value and costs about 120 µs per
gateway span on these machines: as much CPU as proxying the call itself, spent in the
BatchSpanProcessor's thread under the GIL, which also shows as latency spikes while a
batch of 2,048 spans is encoded. This module writes the same `ExportTraceServiceRequest`
bytes directly, in field-number order as protobuf does (tests compare it byte for byte
with the SDK's encoder and parse it with opentelemetry-proto), and keeps the encoding of
short repeated attributes (model, route, cohort, status...) from one span to the next:
about 20 µs per span. Transport, retries, headers and compression stay the SDK's.

Each field's key (its tag) is computed once, at import, from the generated
opentelemetry-proto classes, and named after its message and field (`SPAN_NAME`...).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, SpanFlags
from opentelemetry.proto.trace.v1.trace_pb2 import Status as SpanStatus
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
_HAS_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
# The SDK's SpanKind counts from INTERNAL = 0; OTLP's from SPAN_KIND_UNSPECIFIED = 0.
_KIND_OFFSET = 1
_double = struct.Struct("<d").pack
_fixed64 = struct.Struct("<Q").pack
_fixed32 = struct.Struct("<I").pack

# The private parts of the SDK this module reads (of the versions pyproject.toml allows);
# tests/gate/telemetry/test_otlp_encode.py fails when one of them moves.
SDK_PRIVATE = {
    # BoundedAttributes: the plain dict behind its lock-taking mapping methods (events',
    # links', scopes' and resources' attributes).
    "opentelemetry.attributes.BoundedAttributes": ("_dict",),
    # OTLPSpanExporter: its HTTP client (`.export(bytes)`), shut-down flag, size limit.
    "opentelemetry.exporter.otlp.proto.http.trace_exporter.OTLPSpanExporter": (
        "_client",
        "_shutdown",
        "_max_request_size",
    ),
}


def _varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Protobuf wire types, by the field types the OTLP messages use.
_WIRE_TYPES = {
    FieldDescriptor.TYPE_DOUBLE: 1,  # 64-bit
    FieldDescriptor.TYPE_FIXED64: 1,
    FieldDescriptor.TYPE_FIXED32: 5,  # 32-bit
    FieldDescriptor.TYPE_STRING: 2,  # length-delimited
    FieldDescriptor.TYPE_BYTES: 2,
    FieldDescriptor.TYPE_MESSAGE: 2,
    FieldDescriptor.TYPE_BOOL: 0,  # varint
    FieldDescriptor.TYPE_INT64: 0,
    FieldDescriptor.TYPE_UINT32: 0,
    FieldDescriptor.TYPE_ENUM: 0,
}


def tag(message: type[Message], name: str) -> bytes:
    """The key protobuf writes before a field of `message`: the varint of (field number
    << 3 | wire type), both read from the generated class."""
    field = message.DESCRIPTOR.fields_by_name[name]
    return _varint(field.number << 3 | _WIRE_TYPES[field.type])


REQUEST_RESOURCE_SPANS = tag(ExportTraceServiceRequest, "resource_spans")
RESOURCE_SPANS_RESOURCE = tag(ResourceSpans, "resource")
RESOURCE_SPANS_SCOPE_SPANS = tag(ResourceSpans, "scope_spans")
RESOURCE_SPANS_SCHEMA_URL = tag(ResourceSpans, "schema_url")
RESOURCE_ATTRIBUTES = tag(Resource, "attributes")
SCOPE_SPANS_SCOPE = tag(ScopeSpans, "scope")
SCOPE_SPANS_SPANS = tag(ScopeSpans, "spans")
SCOPE_SPANS_SCHEMA_URL = tag(ScopeSpans, "schema_url")
SCOPE_NAME = tag(InstrumentationScope, "name")
SCOPE_VERSION = tag(InstrumentationScope, "version")
SCOPE_ATTRIBUTES = tag(InstrumentationScope, "attributes")
SPAN_TRACE_ID = tag(Span, "trace_id")
SPAN_SPAN_ID = tag(Span, "span_id")
SPAN_TRACE_STATE = tag(Span, "trace_state")
SPAN_PARENT_SPAN_ID = tag(Span, "parent_span_id")
SPAN_NAME = tag(Span, "name")
SPAN_KIND = tag(Span, "kind")
SPAN_START = tag(Span, "start_time_unix_nano")
SPAN_END = tag(Span, "end_time_unix_nano")
SPAN_ATTRIBUTES = tag(Span, "attributes")
SPAN_DROPPED_ATTRIBUTES = tag(Span, "dropped_attributes_count")
SPAN_EVENTS = tag(Span, "events")
SPAN_DROPPED_EVENTS = tag(Span, "dropped_events_count")
SPAN_LINKS = tag(Span, "links")
SPAN_DROPPED_LINKS = tag(Span, "dropped_links_count")
SPAN_STATUS = tag(Span, "status")
SPAN_FLAGS = tag(Span, "flags")
EVENT_TIME = tag(Span.Event, "time_unix_nano")
EVENT_NAME = tag(Span.Event, "name")
EVENT_ATTRIBUTES = tag(Span.Event, "attributes")
EVENT_DROPPED_ATTRIBUTES = tag(Span.Event, "dropped_attributes_count")
LINK_TRACE_ID = tag(Span.Link, "trace_id")
LINK_SPAN_ID = tag(Span.Link, "span_id")
LINK_ATTRIBUTES = tag(Span.Link, "attributes")
LINK_DROPPED_ATTRIBUTES = tag(Span.Link, "dropped_attributes_count")
LINK_FLAGS = tag(Span.Link, "flags")
STATUS_MESSAGE = tag(SpanStatus, "message")
STATUS_CODE = tag(SpanStatus, "code")
KEY_VALUE_KEY = tag(KeyValue, "key")
KEY_VALUE_VALUE = tag(KeyValue, "value")
ANY_STRING = tag(AnyValue, "string_value")
ANY_BOOL = tag(AnyValue, "bool_value")
ANY_INT = tag(AnyValue, "int_value")
ANY_DOUBLE = tag(AnyValue, "double_value")
ANY_ARRAY = tag(AnyValue, "array_value")
ANY_KVLIST = tag(AnyValue, "kvlist_value")
ANY_BYTES = tag(AnyValue, "bytes_value")
ARRAY_VALUES = tag(ArrayValue, "values")
KVLIST_VALUES = tag(KeyValueList, "values")
# Trace and span ids are fixed-size bytes fields: their length prefix never changes.
_TRACE_ID_LENGTH = _varint(16)
_SPAN_ID_LENGTH = _varint(8)
_TRUE, _FALSE = ANY_BOOL + b"\x01", ANY_BOOL + b"\x00"


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
        return _TRUE if value else _FALSE
    if isinstance(value, str):
        return _text(ANY_STRING, value)
    if isinstance(value, int):
        if not _INT64[0] <= value < _INT64[1]:
            raise ValueError(f"integer out of int64 range: {value}")
        return ANY_INT + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return ANY_DOUBLE + _double(value)
    if isinstance(value, bytes):
        return _field(ANY_BYTES, value)
    if isinstance(value, Sequence):
        return _field(ANY_ARRAY, b"".join(_field(ARRAY_VALUES, _any_value(v)) for v in value))
    if isinstance(value, Mapping):
        pairs = b"".join(_field(KVLIST_VALUES, _key_value(str(k), v)) for k, v in value.items())
        return _field(ANY_KVLIST, pairs)
    raise TypeError(f"cannot encode a {type(value).__name__} attribute")


def _key_value(key: str, value: Any) -> bytes:
    return _text(KEY_VALUE_KEY, key) + _field(KEY_VALUE_VALUE, _any_value(value))


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
            resource_attributes = self._attributes(RESOURCE_ATTRIBUTES, resource.attributes)
            body = [_field(RESOURCE_SPANS_RESOURCE, resource_attributes)]
            for scope, encoded in scopes.items():
                scope_spans = [_field(SCOPE_SPANS_SCOPE, self._scope(scope))]
                scope_spans.extend(_field(SCOPE_SPANS_SPANS, span) for span in encoded)
                if scope is not None and scope.schema_url:
                    scope_spans.append(_text(SCOPE_SPANS_SCHEMA_URL, scope.schema_url))
                body.append(_field(RESOURCE_SPANS_SCOPE_SPANS, b"".join(scope_spans)))
            if resource.schema_url:
                body.append(_text(RESOURCE_SPANS_SCHEMA_URL, resource.schema_url))
            out.append(_field(REQUEST_RESOURCE_SPANS, b"".join(body)))
        return b"".join(out)

    def _span(self, span: ReadableSpan) -> bytes:
        context = span.get_span_context()
        assert context is not None
        parts = [
            SPAN_TRACE_ID + _TRACE_ID_LENGTH + context.trace_id.to_bytes(16, "big"),
            SPAN_SPAN_ID + _SPAN_ID_LENGTH + context.span_id.to_bytes(8, "big"),
        ]
        trace_state = ",".join(f"{k}={v}" for k, v in context.trace_state.items())
        if trace_state:
            parts.append(_text(SPAN_TRACE_STATE, trace_state))
        if span.parent is not None:
            parent_id = span.parent.span_id.to_bytes(8, "big")
            parts.append(SPAN_PARENT_SPAN_ID + _SPAN_ID_LENGTH + parent_id)
        if span.name:
            parts.append(_text(SPAN_NAME, span.name))
        parts.append(SPAN_KIND + _varint(span.kind.value + _KIND_OFFSET))
        if span.start_time:
            parts.append(SPAN_START + _fixed64(span.start_time))
        if span.end_time:
            parts.append(SPAN_END + _fixed64(span.end_time))
        parts.append(self._attributes(SPAN_ATTRIBUTES, span.attributes))
        if span.dropped_attributes:
            parts.append(SPAN_DROPPED_ATTRIBUTES + _varint(span.dropped_attributes))
        for event in span.events:
            parts.append(_field(SPAN_EVENTS, self._event(event)))
        if span.dropped_events:
            parts.append(SPAN_DROPPED_EVENTS + _varint(span.dropped_events))
        for link in span.links:
            parts.append(_field(SPAN_LINKS, self._link(link)))
        if span.dropped_links:
            parts.append(SPAN_DROPPED_LINKS + _varint(span.dropped_links))
        parts.append(_field(SPAN_STATUS, _status(span)))
        parts.append(SPAN_FLAGS + _fixed32(_flags(span.parent)))
        return b"".join(parts)

    def _event(self, event: Any) -> bytes:
        parts = []
        if event.timestamp:
            parts.append(EVENT_TIME + _fixed64(event.timestamp))
        if event.name:
            parts.append(_text(EVENT_NAME, event.name))
        parts.append(self._attributes(EVENT_ATTRIBUTES, event.attributes))
        if event.dropped_attributes:
            parts.append(EVENT_DROPPED_ATTRIBUTES + _varint(event.dropped_attributes))
        return b"".join(parts)

    def _link(self, link: Any) -> bytes:
        context = link.context
        parts = [
            LINK_TRACE_ID + _TRACE_ID_LENGTH + context.trace_id.to_bytes(16, "big"),
            LINK_SPAN_ID + _SPAN_ID_LENGTH + context.span_id.to_bytes(8, "big"),
            self._attributes(LINK_ATTRIBUTES, link.attributes),
        ]
        if link.dropped_attributes:
            parts.append(LINK_DROPPED_ATTRIBUTES + _varint(link.dropped_attributes))
        parts.append(LINK_FLAGS + _fixed32(_flags(context)))
        return b"".join(parts)

    def _scope(self, scope: Any) -> bytes:
        if scope is None:
            return b""
        parts = []
        if scope.name:
            parts.append(_text(SCOPE_NAME, scope.name))
        if scope.version:
            parts.append(_text(SCOPE_VERSION, scope.version))
        parts.append(self._attributes(SCOPE_ATTRIBUTES, scope.attributes))
        return b"".join(parts)

    def _attributes(self, tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
        """Encode attributes as repeated KeyValue fields under `tag`; a value that cannot
        be encoded is logged and left out, as the SDK does."""
        if not attributes:
            return b""
        parts = []
        # The SDK's BoundedAttributes (an event's, a link's, a scope's, a resource's)
        # iterate item by item through its lock; its plain dict is read directly (the span
        # has ended: nothing writes). A span's own attributes come as a read-only proxy.
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
            name = _text(KEY_VALUE_KEY, key)
            if len(self._names) < _CACHE_KEYS:
                self._names[key] = name
        if kind is str:
            text: bytes = value.encode()
            encoded = ANY_STRING + _varint(len(text)) + text
        elif kind is float:
            encoded = ANY_DOUBLE + _double(value)
        else:
            encoded = _any_value(value)
        pair = name + KEY_VALUE_VALUE + _varint(len(encoded)) + encoded
        return _varint(len(pair)) + pair


def _status(span: ReadableSpan) -> bytes:
    status = span.status
    message = _text(STATUS_MESSAGE, status.description) if status.description else b""
    code = status.status_code.value
    return message + (STATUS_CODE + _varint(code) if code else b"")


def _flags(parent: SpanContext | None) -> int:
    if parent is not None and parent.is_remote:
        return _HAS_IS_REMOTE | _IS_REMOTE
    return _HAS_IS_REMOTE


class LeanOTLPSpanExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP span exporter with `SpanEncoder` in place of its encoder.

    Falls back to the SDK's own export, with a warning, where its internals (`SDK_PRIVATE`)
    differ from the versions pyproject.toml allows."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._encoder = SpanEncoder()
        if not self.lean:
            log.warning(
                "otlp_exporter_internals_moved: spans export through the SDK's own encoder "
                "(about 4x the CPU per span); pin the OpenTelemetry versions pyproject.toml allows"
            )

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
