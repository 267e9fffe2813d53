"""OTLP/JSON mapping: lowerCamelCase keys, hex ids, int64 as strings, enums as ints or names."""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable
from typing import Any

from collectors.extra import Extra, event_extra, link_extra, scope_extra, span_extra
from collectors.spans import MAX_NAME, from_unix_nano, service_of, valid_ids
from gate.db.rows import SpanRow

_KINDS = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
_STATUS = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


class BadShape(ValueError):
    """The JSON document is not shaped like an `ExportTraceServiceRequest`."""


class BadSpan(ValueError):
    """One span cannot be read; it is rejected and the others are kept."""


def iter_spans(document: Any, reject: Callable[[str], None]) -> list[SpanRow]:
    """Return the spans of an OTLP/JSON document, calling `reject` for each unreadable span."""
    rows: list[SpanRow] = []
    for resource_spans in _list(_object(document, "request"), "resourceSpans", "resource_spans"):
        resource_spans = _object(resource_spans, "resourceSpans item")
        resource_doc = _get(resource_spans, "resource") or {}
        resource = attributes_of(_list(_object(resource_doc, "resource"), "attributes"))
        service = service_of(resource)
        for scope_spans in _list(resource_spans, "scopeSpans", "scope_spans"):
            scope_spans = _object(scope_spans, "scopeSpans item")
            try:
                scope = _scope(_object(_get(scope_spans, "scope") or {}, "scope"))
            except (TypeError, ValueError) as exc:
                raise BadShape(f"unreadable scope: {exc}") from None
            for span in _list(scope_spans, "spans"):
                try:
                    rows.append(_span(span, resource, service, scope))
                except BadSpan as exc:
                    reject(str(exc))
    return rows


def _scope(scope: dict[str, Any]) -> Extra | None:
    return scope_extra(
        str(scope.get("name") or ""),
        str(scope.get("version") or ""),
        attributes_of(_list(scope, "attributes")),
        _count(scope, "droppedAttributesCount", "dropped_attributes_count"),
    )


def _span(span: Any, resource: dict[str, Any], service: str | None, scope: Extra | None) -> SpanRow:
    if not isinstance(span, dict):
        raise BadSpan("span is not a JSON object")
    try:
        trace_id = _hex(_get(span, "traceId", "trace_id"))
        span_id = _hex(_get(span, "spanId", "span_id"))
        if not valid_ids(trace_id, span_id):
            raise BadSpan("span with an invalid trace id or span id")
        parent = _hex(_get(span, "parentSpanId", "parent_span_id"))
        status = _get(span, "status") or {}
        start_ns = int(_get(span, "startTimeUnixNano", "start_time_unix_nano"))
        end_ns = int(_get(span, "endTimeUnixNano", "end_time_unix_nano"))
        return SpanRow(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=_parent(parent),
            name=str(span.get("name", ""))[:MAX_NAME],
            kind=_enum(span.get("kind", 0), _KINDS),
            start_time=from_unix_nano(start_ns),
            end_time=from_unix_nano(end_ns),
            status_code=_enum(status.get("code", 0), _STATUS),
            status_message=status.get("message") or None,
            attributes=attributes_of(_list(span, "attributes")),
            resource=resource,
            service=service,
            extra=span_extra(
                scope=scope,
                trace_state=str(_get(span, "traceState", "trace_state") or ""),
                flags=_count(span, "flags"),
                events=[_event(_object(item, "event")) for item in _list(span, "events")],
                links=[_link(_object(item, "link")) for item in _list(span, "links")],
                dropped=(
                    _count(span, "droppedAttributesCount", "dropped_attributes_count"),
                    _count(span, "droppedEventsCount", "dropped_events_count"),
                    _count(span, "droppedLinksCount", "dropped_links_count"),
                ),
                start_ns=start_ns,
                end_ns=end_ns,
            ),
        )
    except BadSpan:
        raise
    except (BadShape, TypeError, ValueError, AttributeError) as exc:
        raise BadSpan(f"unreadable span: {exc}") from None


def _event(event: dict[str, Any]) -> Extra:
    return event_extra(
        _count(event, "timeUnixNano", "time_unix_nano"),
        str(event.get("name") or ""),
        attributes_of(_list(event, "attributes")),
        _count(event, "droppedAttributesCount", "dropped_attributes_count"),
    )


def _link(link: dict[str, Any]) -> Extra:
    trace_id, span_id = (
        _hex(_get(link, "traceId", "trace_id")),
        _hex(_get(link, "spanId", "span_id")),
    )
    if not valid_ids(trace_id, span_id):
        raise BadSpan("link with an invalid trace id or span id")
    return link_extra(
        trace_id,
        span_id,
        str(_get(link, "traceState", "trace_state") or ""),
        attributes_of(_list(link, "attributes")),
        _count(link, "droppedAttributesCount", "dropped_attributes_count"),
        _count(link, "flags"),
    )


def _count(document: dict[str, Any], *names: str) -> int:
    """Return an unsigned integer field (int64 fields arrive as strings), 0 when absent."""
    value = int(_get(document, *names) or 0)
    if value < 0:
        raise BadSpan(f"{names[0]} must not be negative")
    return value


def _parent(parent: str) -> str | None:
    if parent == "":
        return None
    if len(parent) != 16:
        raise BadSpan("parent span id must be 8 bytes")
    return parent


def _hex(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadSpan("ids must be hex strings")
    text = value.lower()
    try:
        bytes.fromhex(text)
    except ValueError:
        raise BadSpan(f"id {value[:40]!r} is not hex") from None
    return text


def _enum(value: Any, names: dict[str, int]) -> int:
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        if value not in names:
            raise BadSpan(f"unknown enum value {value!r}")
        return names[value]
    return int(value)


def attributes_of(items: list[Any]) -> dict[str, Any]:
    """Convert a JSON list of `{key, value}` objects to a dict of plain values."""
    result: dict[str, Any] = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise BadShape("attribute is not a {key, value} object")
        result[item["key"]] = value_of(item.get("value") or {})
    return result


def value_of(value: Any) -> Any:
    """Convert one JSON `AnyValue` object to a plain value."""
    if not isinstance(value, dict):
        raise BadShape("attribute value is not an object")
    for key, item in value.items():
        return _typed(key, item)
    return None


def _typed(key: str, item: Any) -> Any:
    if key in ("stringValue", "string_value"):
        return str(item)
    if key in ("boolValue", "bool_value"):
        return bool(item)
    if key in ("intValue", "int_value"):
        return int(item)
    if key in ("doubleValue", "double_value"):
        number = float(item)
        return number if math.isfinite(number) else str(number)
    if key in ("arrayValue", "array_value"):
        return [value_of(entry) for entry in _list(_object(item, "arrayValue"), "values")]
    if key in ("kvlistValue", "kvlist_value"):
        return attributes_of(_list(_object(item, "kvlistValue"), "values"))
    if key in ("bytesValue", "bytes_value"):
        try:
            return base64.b64encode(base64.b64decode(item, validate=True)).decode("ascii")
        except (binascii.Error, TypeError):
            raise BadShape("bytesValue is not base64") from None
    raise BadShape(f"unknown attribute value type {key!r}")


def _get(document: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in document:
            return document[name]
    return None


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadShape(f"{what} is not a JSON object")
    return value


def _list(document: dict[str, Any], *names: str) -> list[Any]:
    value = _get(document, *names)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadShape(f"{names[0]} is not a list")
    return value
