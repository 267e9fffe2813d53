"""Decode OTLP `ExportTraceServiceRequest` bodies (protobuf or JSON) into span rows."""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from collectors import otlp_json
from collectors.extra import (
    Extra,
    event_extra,
    link_extra,
    plain_extra,
    scope_extra,
    span_extra,
)
from collectors.spans import MAX_NAME, from_unix_nano, service_of, valid_ids
from gate.db.rows import SpanRow


class MalformedPayload(ValueError):
    """The body is not an `ExportTraceServiceRequest` at all (the whole request is refused)."""


@dataclass(slots=True)
class Decoded:
    """Spans decoded from one request, and how many were rejected and why."""

    rows: list[SpanRow] = field(default_factory=list)
    rejected: int = 0
    error: str | None = None

    def reject(self, reason: str) -> None:
        """Count one rejected span, keeping the first reason for the partial-success reply."""
        self.rejected += 1
        if self.error is None:
            self.error = reason


def decode_protobuf(body: bytes) -> Decoded:
    """Decode a binary protobuf request; raise `MalformedPayload` if it does not parse."""
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except Exception as exc:  # protobuf's DecodeError, and upb's errors on invalid UTF-8
        raise MalformedPayload(f"body is not a protobuf ExportTraceServiceRequest: {exc}") from None
    decoded = Decoded()
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        service = service_of(resource)
        for scope_spans in resource_spans.scope_spans:
            pb_scope = scope_spans.scope
            scope = scope_extra(
                pb_scope.name,
                pb_scope.version,
                attributes_of(pb_scope.attributes),
                pb_scope.dropped_attributes_count,
            )
            for span in scope_spans.spans:
                _add_span(decoded, span, resource, service, scope)
    return decoded


def decode_json(body: bytes) -> Decoded:
    """Decode an OTLP/JSON request (hex ids); raise `MalformedPayload` on bad JSON."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedPayload(f"body is not JSON: {exc}") from None
    decoded = Decoded()
    try:
        rows = otlp_json.iter_spans(document, decoded.reject)
        decoded.rows.extend(rows)
    except otlp_json.BadShape as exc:
        raise MalformedPayload(
            f"body is not an OTLP/JSON ExportTraceServiceRequest: {exc}"
        ) from None
    return decoded


def _add_span(
    decoded: Decoded,
    span: Span,
    resource: dict[str, Any],
    service: str | None,
    scope: Extra | None,
) -> None:
    trace_id = span.trace_id.hex()
    span_id = span.span_id.hex()
    parent = span.parent_span_id
    if not valid_ids(trace_id, span_id) or len(parent) not in (0, 8):
        decoded.reject("span with an invalid trace id, span id or parent span id")
        return
    decoded.rows.append(
        SpanRow(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent.hex() if parent else None,
            name=span.name[:MAX_NAME],
            kind=span.kind,
            start_time=from_unix_nano(span.start_time_unix_nano),
            end_time=from_unix_nano(span.end_time_unix_nano),
            status_code=span.status.code,
            status_message=span.status.message or None,
            attributes=attributes_of(span.attributes),
            resource=resource,
            service=service,
            extra=_extra(span, scope),
        )
    )


def _extra(span: Span, scope: Extra | None) -> Extra | None:
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    dropped = (span.dropped_attributes_count, span.dropped_events_count, span.dropped_links_count)
    if not (span.events or span.links or span.trace_state or any(dropped)):
        return plain_extra(scope, span.flags, start, end)
    events = [
        event_extra(
            event.time_unix_nano,
            event.name,
            attributes_of(event.attributes),
            event.dropped_attributes_count,
        )
        for event in span.events
    ]
    links = [
        link_extra(
            link.trace_id.hex(),
            link.span_id.hex(),
            link.trace_state,
            attributes_of(link.attributes),
            link.dropped_attributes_count,
            link.flags,
        )
        for link in span.links
    ]
    return span_extra(
        scope=scope,
        trace_state=span.trace_state,
        flags=span.flags,
        events=events,
        links=links,
        dropped=dropped,
        start_ns=start,
        end_ns=end,
    )


def attributes_of(pairs: Any) -> dict[str, Any]:
    """Convert repeated `KeyValue` to a dict of JSON-ready Python values."""
    result: dict[str, Any] = {}
    for pair in pairs:
        result[pair.key] = value_of(pair.value)
    return result


def value_of(value: AnyValue) -> Any:
    """Convert one `AnyValue` to a JSON-ready Python value."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value" or which == "bool_value":
        return getattr(value, which)
    if which == "double_value":
        number = value.double_value
        # JSONB has no NaN or infinity; keep them readable rather than failing the span.
        return number if math.isfinite(number) else str(number)
    if which == "array_value":
        return [value_of(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return {_key(item): value_of(item.value) for item in value.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return None


def _key(item: KeyValue) -> str:
    return item.key
