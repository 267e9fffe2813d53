"""The SSE fast path agrees with the per-event path on arbitrary valid streams: any chunk
boundaries, multi-line data, comments and other fields, CRLF or LF, `[DONE]`, usage chunks
kept or dropped (hypothesis)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gate.gateway import sse
from gate.gateway.observe import CallResult
from gate.gateway.upstream import Stream

texts = st.text(max_size=12)
deltas = st.fixed_dictionaries(
    {"content": st.one_of(st.none(), texts)},
    optional={"tool_calls": st.just([{"index": 0, "function": {"arguments": "{}"}}])},
)
choices = st.lists(
    st.fixed_dictionaries(
        {"index": st.integers(0, 1), "delta": deltas},
        optional={"finish_reason": st.sampled_from([None, "stop", "length"])},
    ),
    max_size=2,
)
usage = st.fixed_dictionaries(
    {"prompt_tokens": st.integers(0, 99), "completion_tokens": st.integers(0, 99)}
)
chunks = st.fixed_dictionaries(
    {"id": st.sampled_from(["r1", "r2"]), "choices": choices},
    optional={"model": texts, "usage": st.one_of(st.none(), usage), "note": texts},
)
usage_only = st.fixed_dictionaries({"id": st.just("r1"), "choices": st.just([]), "usage": usage})
objects = st.one_of(chunks, usage_only)
# Data that is JSON but not an object, and data that is not JSON (it marks the call an error).
other_data = st.sampled_from([b"5", b'"s"', b"null", b"[1, 2]", b"not json", b'{"a": 1},{"b": 2}'])
line_text = st.text(st.characters(blacklist_characters="\r\n"), max_size=10).map(str.encode)


def plain(document: dict[str, Any]) -> bytes:
    return sse.DATA_PREFIX + orjson.dumps(document)


@st.composite
def events(draw: st.DrawFn) -> bytes:
    """One event, without its blank line."""
    kind = draw(st.sampled_from(["plain"] * 4 + ["tight", "lines", "comment", "field", "other"]))
    document = draw(objects)
    if kind == "plain":
        return plain(document)
    if kind == "tight":  # no space after the field name
        return sse.DATA_FIELD + orjson.dumps(document)
    if kind == "lines":  # one JSON text over several data lines
        lines = orjson.dumps(document, option=orjson.OPT_INDENT_2).split(b"\n")
        return b"\n".join(sse.DATA_PREFIX + line for line in lines)
    if kind == "comment":
        return b":" + draw(line_text)
    if kind == "field":  # another field before the data
        name = draw(st.sampled_from([b"event: message", b"id: 7", b"retry: 10"]))
        return name + b"\n" + plain(document)
    return sse.DATA_PREFIX + draw(other_data)


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """A stream: events ended by blank lines, perhaps `[DONE]`, perhaps an unfinished last
    event, each line end CRLF or LF."""
    body = [draw(events()) for _ in range(draw(st.integers(0, 8)))]
    if draw(st.booleans()):  # where upstreams put the usage chunk: last, before the end
        body.append(plain(draw(usage_only)))
    if draw(st.booleans()):
        body.append(sse.DATA_PREFIX + sse.DONE)
    text = b"".join(e + b"\n\n" for e in body)
    if body and draw(st.booleans()):  # the last event's blank line (or whole end) missing
        text = text[: -draw(st.sampled_from([1, 2]))]
    lines = text.split(b"\n")
    ends = [draw(st.sampled_from([b"\n", b"\r\n"])) for _ in lines[:-1]]
    return b"".join(line + end for line, end in zip(lines, ends, strict=False)) + lines[-1]


@st.composite
def reads(draw: st.DrawFn, stream: bytes) -> list[bytes]:
    """The stream cut into reads at arbitrary places."""
    most = draw(st.sampled_from([0, 2, 12]))  # one read, a few, many
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=most)))
    edges = [0, *[c for c in cuts if c < len(stream)], len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(edges) if b > a]


class Arriving:
    """An upstream response whose body arrives in the given reads."""

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts
        self.left = len(parts)
        self.released = False

    @property
    def at_end(self) -> bool:
        return self.left == 0

    async def chunks(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            self.left -= 1
            yield part

    def release(self) -> None:
        self.released = True

    def close(self) -> None:
        raise AssertionError("a stream read to its end is released, not closed")


def through_the_gateway(parts: list[bytes], *, strip_usage: bool) -> tuple[bytes, Stream]:
    stream = Stream(Arriving(parts), CallResult(), capture=True)  # type: ignore[arg-type]

    async def read() -> bytes:
        return b"".join([data async for data in stream.events(strip_usage=strip_usage)])

    return asyncio.run(read()), stream


def event_by_event(text: bytes, *, strip_usage: bool) -> tuple[bytes, Stream]:
    """The per-event path over the whole stream at once: the reference."""
    stream = Stream(Arriving([]), CallResult(), capture=True)  # type: ignore[arg-type]
    complete, rest = sse.split_complete(sse.normalise(text))
    if strip_usage:
        complete = sse.strip_null_usage(complete)
    forwarded = []
    for event in sse.split_events(complete) if complete else []:
        if stream._observe(sse.event_data(event), 0.0) or not strip_usage:
            forwarded.append(event + sse.EVENT_END)
    if rest.strip() and (stream._observe(sse.event_data(rest), 0.0) or not strip_usage):
        forwarded.append(rest)
    return b"".join(forwarded), stream


def observed(stream: Stream) -> dict[str, Any]:
    """What a call's accounting holds, less its clock readings."""
    r = stream.result
    return {
        "done": stream.done,
        "status": r.status,
        "error": r.error,
        "content_chunks": r.content_chunks,
        "finish_reason": r.finish_reason,
        "response_id": r.response_id,
        "response_model": r.response_model,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "text": r.output_text,
        "tool_calls": r.tool_calls,
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), text=streams(), strip_usage=st.booleans())
def test_the_stream_read_in_any_reads_equals_the_per_event_path(data, text, strip_usage):
    parts = data.draw(reads(text))
    forwarded, stream = through_the_gateway(parts, strip_usage=strip_usage)
    expected, reference = event_by_event(text, strip_usage=strip_usage)
    assert forwarded == expected
    assert observed(stream) == observed(reference)
    assert stream.response.released  # type: ignore[attr-defined]


@settings(max_examples=300, deadline=None)
@given(text=streams())
def test_the_fast_path_parses_a_read_as_the_per_event_path_does(text):
    complete, _ = sse.split_complete(sse.normalise(text))
    parsed = sse.parse_plain(complete) if complete else None
    if parsed is None:
        return
    documents, done = parsed
    split = sse.split_events(complete)
    payloads = [sse.event_data(event) for event in split]
    assert all(payload is not None for payload in payloads)
    values = [orjson.loads(p) for p in payloads if p is not None and not sse.is_done(p)]
    assert documents == values and all(isinstance(v, dict) for v in values)
    assert done == sse.is_done(payloads[-1] or b"")


@settings(max_examples=100, deadline=None)
@given(
    body=st.lists(objects, min_size=1, max_size=8).map(lambda ds: [plain(d) for d in ds]),
    done=st.booleans(),
)
def test_plain_events_take_the_fast_path(body, done):
    """What upstreams send (one `data: {...}` line per event, then `[DONE]`) is parsed in
    one call: the property above is not met by always declining."""
    events = body + ([sse.DATA_PREFIX + sse.DONE] if done else [])
    parsed = sse.parse_plain(sse.join_events(events))
    assert parsed is not None
    assert parsed == ([orjson.loads(e[len(sse.DATA_PREFIX) :]) for e in body], done)
