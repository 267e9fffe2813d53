"""An OTel SDK `SpanExporter` that hands spans straight to the in-process writer."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from collectors.extra import Extra, event_extra, link_extra, scope_extra, span_extra
from collectors.spans import MAX_NAME, from_unix_nano, service_of
from gate.db.rows import SpanRow

# OTLP `SpanFlags`: whether the parent's remoteness is known, and whether it is remote.
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200

log = logging.getLogger(__name__)

Enqueue = Callable[[Sequence[SpanRow]], int]


class SinkSpanExporter(SpanExporter):
    """Converts finished spans to rows and enqueues them; `enqueue` returns how many dropped."""

    def __init__(self, enqueue: Enqueue, *, flush: Callable[[float], bool] | None = None) -> None:
        self._enqueue = enqueue
        self._flush = flush
        self._resource: tuple[Resource, dict[str, Any], str | None] | None = None
        self._shut_down = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Enqueue the spans; report failure only if the writer dropped some."""
        if self._shut_down:
            return SpanExportResult.FAILURE
        rows = [self.row(span) for span in spans if span.context is not None]
        dropped = self._enqueue(rows)
        return SpanExportResult.FAILURE if dropped else SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait until the writer has stored or spooled everything enqueued."""
        return True if self._flush is None else self._flush(timeout_millis / 1000)

    def shutdown(self) -> None:
        """Refuse further exports; the writer is owned (and stopped) by whoever created it."""
        self._shut_down = True

    def row(self, span: ReadableSpan) -> SpanRow:
        """Convert one SDK span to a span row (OTLP kind numbering)."""
        context = span.context
        if context is None:
            raise ValueError("span without a context")
        resource, service = self._resource_of(span.resource)
        parent = span.parent
        start = span.start_time or 0
        return SpanRow(
            trace_id=f"{context.trace_id:032x}",
            span_id=f"{context.span_id:016x}",
            parent_span_id=f"{parent.span_id:016x}" if parent is not None else None,
            name=span.name[:MAX_NAME],
            kind=span.kind.value + 1,
            start_time=from_unix_nano(start),
            end_time=from_unix_nano(span.end_time or start),
            status_code=span.status.status_code.value,
            status_message=span.status.description or None,
            attributes=plain(span.attributes or {}),
            resource=resource,
            service=service,
            extra=sdk_extra(span),
        )

    def _resource_of(self, resource: Resource) -> tuple[dict[str, Any], str | None]:
        # A provider has one resource: convert it once.
        cached = self._resource
        if cached is None or cached[0] is not resource:
            converted = plain(resource.attributes)
            cached = self._resource = (resource, converted, service_of(converted))
        return cached[1], cached[2]


def sdk_extra(span: ReadableSpan) -> Extra | None:
    """Return what the OTLP encoder would send beyond the columns, as `collectors.extra`."""
    context = span.context
    scope = span.instrumentation_scope
    events = [
        event_extra(event.timestamp, event.name, plain(event.attributes or {}),
                    event.dropped_attributes)
        for event in span.events
    ]  # fmt: skip
    links = [
        link_extra(
            f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}",
            _trace_state(link.context.trace_state), plain(link.attributes or {}),
            link.dropped_attributes, _flags(link.context),
        )
        for link in span.links
    ]  # fmt: skip
    start = span.start_time or 0
    return span_extra(
        scope=None
        if scope is None
        else scope_extra(scope.name, scope.version or "", plain(scope.attributes or {}), 0),
        trace_state=_trace_state(context.trace_state) if context is not None else "",
        flags=_flags(span.parent),
        events=events,
        links=links,
        dropped=(span.dropped_attributes, span.dropped_events, span.dropped_links),
        start_ns=start,
        end_ns=span.end_time or start,
    )


def _trace_state(state: Any) -> str:
    return ",".join(f"{key}={value}" for key, value in state.items()) if state else ""


def _flags(parent: Any) -> int:
    return _HAS_IS_REMOTE | (_IS_REMOTE if parent is not None and parent.is_remote else 0)


def plain(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Return attributes as a JSON-ready dict (sequences become lists, NaN a string)."""
    return {key: _plain(value) for key, value in attributes.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSONB has no NaN or infinity
    return value
