"""Helpers for the flat span row (`gate.db.rows.SpanRow`) every input (OTLP, the SDK
exporter, the spool) is converted to: ids, times, column limits, NUL scrubbing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gate.db.rows import SpanRow

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Span kinds and status codes use the OTLP wire numbering (the SDK's SpanKind is off by one).
KIND_UNSPECIFIED, KIND_INTERNAL, KIND_SERVER, KIND_CLIENT = 0, 1, 2, 3
STATUS_ERROR = 2

# Column limits of the `spans` table; longer values are cut rather than failing the batch.
MAX_NAME = 256
MAX_SERVICE = 128
# Set by the collector on a span it had to remove NUL characters from: how many.
NUL_REMOVED = "specgate.collector.nul_removed"


def from_unix_nano(nanos: int) -> datetime:
    """Convert OTLP nanoseconds since the epoch to a UTC datetime (microsecond precision)."""
    return EPOCH + timedelta(microseconds=nanos // 1000)


def to_unix_nano(moment: datetime) -> int:
    """Convert a UTC datetime back to nanoseconds since the epoch."""
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def service_of(resource: dict[str, Any]) -> str | None:
    """Return the resource's `service.name`, cut to the column size."""
    service = resource.get("service.name")
    return str(service)[:MAX_SERVICE] if service is not None else None


def valid_ids(trace_id: str, span_id: str) -> bool:
    """Whether the hex ids have OTLP's lengths and are not all zero (invalid per the spec)."""
    return (
        len(trace_id) == 32 and len(span_id) == 16 and trace_id != "0" * 32 and span_id != "0" * 16
    )


def scrub(row: SpanRow) -> tuple[SpanRow, int]:
    """Return a copy without NUL characters, which Postgres text and JSONB refuse, and how
    many were removed; a copy that lost any says so in its `NUL_REMOVED` attribute."""
    removed = [0]
    attributes = _scrub(row.attributes, removed)
    clean = SpanRow(
        trace_id=row.trace_id,
        span_id=row.span_id,
        parent_span_id=row.parent_span_id,
        name=_scrub(row.name, removed),
        kind=row.kind,
        start_time=row.start_time,
        end_time=row.end_time,
        status_code=row.status_code,
        status_message=_scrub(row.status_message, removed),
        attributes=attributes,
        resource=_scrub(row.resource, removed),
        service=_scrub(row.service, removed),
        extra=_scrub(row.extra, removed),
    )
    if removed[0]:
        clean.attributes = {**attributes, NUL_REMOVED: removed[0]}
    return clean, removed[0]


def _scrub(value: Any, removed: list[int]) -> Any:
    if isinstance(value, str):
        count = value.count("\x00")
        if not count:
            return value
        removed[0] += count
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {_scrub(key, removed): _scrub(item, removed) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrub(item, removed) for item in value]
    return value
