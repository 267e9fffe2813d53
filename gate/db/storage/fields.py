"""The shape of a span as the `spans` table stores it, shared by both storage implementations."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol


class SpanFields(Protocol):
    """A span as the `spans` table stores it (all its columns but `received_at`)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    service: str | None
    start_time: datetime
    end_time: datetime
    status_code: int
    status_message: str | None
    attributes: dict[str, Any]
    resource: dict[str, Any]
    extra: dict[str, Any] | None
