"""Stripping the logprobs we asked for from streamed answers (hypothesis): every
`logprobs` value becomes null and every other byte stays as the upstream wrote it, in
any formatting, with any text in the answer; streams without them pass untouched."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gate.gateway import sse
from gate.gateway.logprobs import strip_choices, strip_events, strip_json
from gate.gateway.observe import CallResult

# Text that looks like JSON structure, a member name included, so a strip that read
# inside strings would be caught.
structure = st.sampled_from(['"', "\\", "{", "}", ",", ":", ',"logprobs":'])
tricky = st.lists(st.one_of(st.characters(exclude_categories=("Cs",)), structure), max_size=8).map(
    "".join
)
entries = st.lists(
    st.fixed_dictionaries(
        {
            "token": tricky,
            "logprob": st.floats(-50, 0, allow_nan=False),
            "bytes": st.lists(st.integers(0, 255), max_size=3),
            "top_logprobs": st.just([]),
        }
    ),
    min_size=1,
    max_size=3,
)
chat_logprobs = st.fixed_dictionaries({"content": entries})
legacy_logprobs = st.fixed_dictionaries(
    {
        "tokens": st.lists(tricky, max_size=2),
        "token_logprobs": st.lists(st.floats(-50, 0, allow_nan=False), max_size=2),
    }
)
logprob_values = st.one_of(st.none(), chat_logprobs, legacy_logprobs)


@st.composite
def chunks(draw: st.DrawFn) -> dict[str, Any]:
    """A streamed chunk in the OpenAI shape, its choices perhaps carrying logprobs."""
    choices = []
    for index in range(draw(st.integers(0, 2))):
        choice: dict[str, Any] = {"index": index, "delta": {"content": draw(tricky)}}
        if draw(st.booleans()):
            choice["logprobs"] = draw(logprob_values)
        choice["finish_reason"] = draw(st.sampled_from([None, "stop"]))
        choices.append(choice)
    chunk: dict[str, Any] = {"id": draw(tricky), "choices": choices}
    if draw(st.booleans()):
        chunk["usage"] = None
    return chunk


# How an upstream may write JSON: compact, spaced, ASCII-escaped or not.
formats = st.sampled_from(
    [
        lambda d: orjson.dumps(d),
        lambda d: json.dumps(d).encode(),
        lambda d: json.dumps(d, ensure_ascii=False, separators=(" ,", " : ")).encode(),
    ]
)


def nulled(chunk: dict[str, Any]) -> dict[str, Any]:
    """The chunk as the client gets it: each choice's logprobs, where present, null."""
    choices = [{**c, "logprobs": None} if "logprobs" in c else c for c in chunk["choices"]]
    return {**chunk, "choices": choices}


def stream_of(documents: list[dict[str, Any]], write: Any) -> bytes:
    return b"".join(sse.DATA_PREFIX + write(d) + sse.EVENT_END for d in documents)


@settings(max_examples=300, deadline=None)
@given(st.lists(chunks(), max_size=5), formats, st.booleans())
def test_only_the_logprobs_values_change_byte_for_byte(documents, write, done):
    tail = sse.DATA_PREFIX + sse.DONE + sse.EVENT_END if done else b""
    upstream = stream_of(documents, write) + tail
    expected = stream_of([nulled(d) for d in documents], write) + tail
    assert strip_events(upstream) == expected
    # Stripping again changes nothing; so does splitting the run into events first.
    assert strip_events(expected) == expected
    one_by_one = b"".join(strip_events(e + sse.EVENT_END) for e in sse.split_events(upstream))
    assert one_by_one == expected if upstream else True


@settings(max_examples=200, deadline=None)
@given(st.lists(chunks(), max_size=4))
def test_a_value_over_several_data_lines_is_still_stripped(documents):
    """A JSON text split over data lines cannot be edited in place: it becomes one line."""
    upstream = b"".join(
        b"\n".join(sse.DATA_PREFIX + line for line in json.dumps(d, indent=1).encode().split(b"\n"))
        + sse.EVENT_END
        for d in documents
    )
    stripped = strip_events(upstream)
    got = [orjson.loads(sse.event_data(e)) for e in sse.split_events(stripped)] if stripped else []
    assert got == [strip_choices(nulled(d)) if has_values(d) else d for d in documents]


def has_values(chunk: dict[str, Any]) -> bool:
    return any(c.get("logprobs") is not None for c in chunk["choices"])


@settings(max_examples=200, deadline=None)
@given(st.lists(chunks(), max_size=5))
def test_a_stream_without_logprobs_is_left_as_it_is(documents):
    plain = [{**d, "choices": [strip_choices_one(c) for c in d["choices"]]} for d in documents]
    upstream = stream_of(plain, orjson.dumps)
    assert strip_events(upstream) is upstream or strip_events(upstream) == upstream


def strip_choices_one(choice: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in choice.items() if k != "logprobs"}


@settings(max_examples=200, deadline=None)
@given(st.lists(chunks(), max_size=5))
def test_the_summary_of_a_stream_counts_every_logprob_it_carried(documents):
    result = CallResult()
    result.on_chunks(documents, 0.0, capture=False)
    values = [
        v
        for d in documents
        for c in d["choices"]
        if isinstance(c.get("logprobs"), dict)
        for v in (
            [e["logprob"] for e in c["logprobs"]["content"]]
            if "content" in c["logprobs"]
            else c["logprobs"]["token_logprobs"]
        )
    ]
    assert result.logprob_tokens == (len(values) or None)
    if values:
        assert result.logprob_sum is not None
        assert abs(result.logprob_sum - sum(values)) < 1e-6 * (1 + abs(sum(values)))


def test_a_non_streamed_answer_loses_its_logprobs_and_keeps_the_rest():
    answer = {"choices": [{"index": 0, "message": {"content": "hé"}, "logprobs": {"content": []}}]}
    assert orjson.loads(strip_json(json.dumps(answer).encode())) == nulled(answer)


LOGPROB_CHUNK = b'{"choices": [{"index": 0, "logprobs": {"content": [{"logprob": -1}]}}]}'
NULLED_CHUNK = b'{"choices": [{"index": 0, "logprobs": null}]}'


def test_an_event_with_other_fields_or_no_blank_line_keeps_its_bytes():
    # Other fields, a comment, and a stream's last event cut before its blank line: only
    # the value changes, every line where it was.
    for before, after in (
        (b"event: chunk\n", b"\nid: 7\n\n"),
        (b": keep\n", b"\n\n"),
        (b"", b"\n"),
        (b"id: 1\n", b""),
    ):
        upstream = before + b"data: " + LOGPROB_CHUNK + after
        assert strip_events(upstream) == before + b"data: " + NULLED_CHUNK + after


def test_a_value_too_deep_to_read_is_forwarded_not_raised():
    # A broken upstream's nesting must not end the client's stream with an exception.
    deep = b'data: {"choices": [{"logprobs": ' + b"[" * 5000 + b"]" * 5000 + b"}]}\n\n"
    assert strip_events(deep) == deep
    assert strip_events(b": x\n" + deep) == b": x\n" + deep
