"""Server-sent events as upstreams write them, at the byte level.

An event is a few `field: value` lines ended by a blank line; upstreams send one
`data: {...}` line per event (a JSON chunk) and end with `data: [DONE]`. Two ways to read
a run of complete events:

- the per-event path (`split_events`, `event_data`): any valid stream (comments, other
  fields, multi-line data), one JSON parse per event;
- the fast path (`parse_plain`): a run of plain events (each exactly `data: {...}`, then
  perhaps `data: [DONE]`) becomes one JSON array, parsed in one call: about half the cost
  per streamed answer. It answers None for anything else, which then takes the per-event
  path; where it answers, it agrees with the per-event path (a property test holds it to
  that on arbitrary streams).

Line ends are normalised to LF first (`normalise`), so every separator below is LF-only.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

LF = b"\n"
CRLF = b"\r\n"
EVENT_END = b"\n\n"  # the blank line that ends an event
DATA_FIELD = b"data:"
DATA_PREFIX = b"data: "  # the data field as upstreams write it, with its one space
OBJECT_EVENT = DATA_PREFIX + b"{"  # a plain event: one JSON object on one data line
DONE = b"[DONE]"
# Where one plain event's object ends and the next one's begins, and the tail of a run
# that ends with the end marker. A JSON text on one line holds no raw line break, so
# these can only be event boundaries, never the inside of a string.
BETWEEN_OBJECTS = b"}" + EVENT_END + OBJECT_EVENT
AS_ARRAY_ITEMS = b"},{"
OBJECTS_THEN_DONE = b"}" + EVENT_END + DATA_PREFIX + DONE
USAGE_KEY = b'"usage"'
# A `"usage": null` member (an unescaped quote can only be JSON structure, never inside a
# string), removed for a client that did not ask for usage.
_NULL_USAGE = re.compile(rb',\s*"usage"\s*:\s*null(?=\s*[,}])|"usage"\s*:\s*null\s*,')


def normalise(buffer: bytes) -> bytes:
    """CRLF line ends as LF (a CR still waiting for its LF stays, to be joined later)."""
    return buffer.replace(CRLF, LF) if b"\r" in buffer else buffer


def split_complete(buffer: bytes) -> tuple[bytes, bytes]:
    """Split a normalised buffer after its last complete event: (complete events, rest);
    no complete event gives (b"", buffer)."""
    end = buffer.rfind(EVENT_END)
    if end == -1:
        return b"", buffer
    cut = end + len(EVENT_END)
    return buffer[:cut], buffer[cut:]


def split_events(complete: bytes) -> list[bytes]:
    """The events of a run of complete events, each without its blank line."""
    return complete[: -len(EVENT_END)].split(EVENT_END)


def join_events(events: list[bytes]) -> bytes:
    """Complete events again, each ended by its blank line."""
    return b"".join(event + EVENT_END for event in events)


def event_data(event: bytes) -> bytes | None:
    """The data of one event (its data lines joined by LF), None when it has none."""
    if event.startswith(DATA_PREFIX) and LF not in event:  # the usual one-line event
        return event[len(DATA_PREFIX) :]
    lines = [
        line[len(DATA_FIELD) :].strip()
        for line in event.splitlines()
        if line.startswith(DATA_FIELD)
    ]
    return LF.join(lines) if lines else None


def is_done(data: bytes) -> bool:
    """Whether an event's data is the end marker."""
    return data[:1] == b"[" and data.rstrip() == DONE


def parse_plain(complete: bytes) -> tuple[list[dict[str, Any]], bool] | None:
    """The fast path: a run of complete plain events as (their objects, whether the run
    ends with `[DONE]`), parsed in one call; None for anything else."""
    body = complete[: -len(EVENT_END)]
    if not body.startswith(OBJECT_EVENT):
        return None
    joined = body[len(DATA_PREFIX) :].replace(BETWEEN_OBJECTS, AS_ARRAY_ITEMS)
    done = joined.endswith(OBJECTS_THEN_DONE)
    if done:
        joined = joined[: 1 - len(OBJECTS_THEN_DONE)]  # keep the last object's brace
    if LF in joined:
        return None  # another kind of event, or a data line split in two
    try:
        parsed: list[dict[str, Any]] = orjson.loads(b"[" + joined + b"]")
    except orjson.JSONDecodeError:
        return None
    if len(parsed) != complete.count(EVENT_END) - done:
        return None  # an event held more than one value: take them one by one
    return parsed, done


def without_last_object(complete: bytes) -> bytes:
    """A run of plain events less its last object event (where a usage chunk sits)."""
    cut = complete.rfind(EVENT_END + OBJECT_EVENT)
    start = 0 if cut < 0 else cut + len(EVENT_END)
    end = complete.index(EVENT_END, start) + len(EVENT_END)
    return complete[:start] + complete[end:]


def strip_null_usage(events: bytes) -> bytes:
    """Remove `"usage": null` members (asked for on the client's behalf)."""
    return _NULL_USAGE.sub(b"", events)
