"""What an OTLP span carries beyond the `spans` columns, kept in `spans.extra` as plain JSON.

Keys follow the OTLP protobuf field names; a key is left out when its value is the
default (empty, zero), so the dict is None for a span with none of them:

- `scope`: {`name`, `version`, `attributes`, `dropped_attributes_count`} of its
  instrumentation scope (one dict shared by the spans of a scope);
- `trace_state` (W3C text), `flags` (OTLP `SpanFlags` bits);
- `events`: [{`time_unix_nano`, `name`, `attributes`, `dropped_attributes_count`}];
- `links`: [{`trace_id`, `span_id`, `trace_state`, `attributes`,
  `dropped_attributes_count`, `flags`}] with hex ids;
- `dropped_attributes_count`, `dropped_events_count`, `dropped_links_count`;
- `start_time_unix_nano`, `end_time_unix_nano`: only when the time columns, which hold
  microseconds, would lose the nanoseconds.
"""

from __future__ import annotations

from typing import Any

Extra = dict[str, Any]


def compact(fields: dict[str, Any]) -> Extra:
    """Return `fields` without the keys whose value is a default (None, 0, "", empty)."""
    return {key: value for key, value in fields.items() if value not in (None, 0, "", [], {})}


def span_extra(
    *,
    scope: Extra | None,
    trace_state: str,
    flags: int,
    events: list[Extra],
    links: list[Extra],
    dropped: tuple[int, int, int],
    start_ns: int,
    end_ns: int,
) -> Extra | None:
    """Return a span's extra fields, or None when it has none."""
    extra = compact(
        {
            "scope": scope,
            "trace_state": trace_state,
            "flags": flags,
            "events": events,
            "links": links,
            "dropped_attributes_count": dropped[0],
            "dropped_events_count": dropped[1],
            "dropped_links_count": dropped[2],
            # The time columns keep microseconds; the exact nanoseconds when they differ.
            "start_time_unix_nano": start_ns if start_ns % 1000 else None,
            "end_time_unix_nano": end_ns if end_ns % 1000 else None,
        }
    )
    return extra or None


def plain_extra(scope: Extra | None, flags: int, start_ns: int, end_ns: int) -> Extra | None:
    """Return the extra fields of a span with only a scope, flags and times (the common
    case, kept cheap: it runs for every span)."""
    extra: Extra = {}
    if scope:
        extra["scope"] = scope
    if flags:
        extra["flags"] = flags
    if start_ns % 1000:
        extra["start_time_unix_nano"] = start_ns
    if end_ns % 1000:
        extra["end_time_unix_nano"] = end_ns
    return extra or None


def scope_extra(name: str, version: str, attributes: dict[str, Any], dropped: int) -> Extra | None:
    """Return an instrumentation scope's fields, or None for an empty scope."""
    scope = compact(
        {
            "name": name,
            "version": version,
            "attributes": attributes,
            "dropped_attributes_count": dropped,
        }
    )
    return scope or None


def event_extra(time_ns: int, name: str, attributes: dict[str, Any], dropped: int) -> Extra:
    """Return one span event (its time and name always kept)."""
    event = {"time_unix_nano": time_ns, "name": name}
    return event | compact({"attributes": attributes, "dropped_attributes_count": dropped})


def link_extra(
    trace_id: str, span_id: str, trace_state: str, attributes: dict[str, Any], dropped: int,
    flags: int,
) -> Extra:  # fmt: skip
    """Return one span link (its ids always kept)."""
    link = {"trace_id": trace_id, "span_id": span_id}
    return link | compact(
        {
            "trace_state": trace_state,
            "attributes": attributes,
            "dropped_attributes_count": dropped,
            "flags": flags,
        }
    )
