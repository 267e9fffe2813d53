"""Reading an upstream's SSE stream: every event forwarded as it came, each accounted for
(parsed a read at a time, or one by one when a read holds something else)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from gate.db.enums import GenerationStatus
from gate.gateway.upstream import Stream, open_stream
from gate.routing.snapshot import RouteTarget
from tests.gate.gateway.conftest import upstream_client
from tests.gate.gateway.test_http1 import chunk, read_request, serving

# Every route client passes these (gate/gateway/transport.py).
pytestmark = pytest.mark.usefixtures("each_transport")


def event(document: object) -> bytes:
    return b"data: " + orjson.dumps(document) + b"\n\n"


def delta(text: str | None, *, finish: str | None = None, index: int = 0) -> bytes:
    choice = {"index": index, "delta": {"content": text}, "finish_reason": finish}
    return event({"id": "r1", "model": "m", "choices": [choice]})


USAGE = event({"id": "r1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})
DONE = b"data: [DONE]\n\n"


def stream_through(writes: list[bytes], *, strip_usage: bool, capture: bool = False):
    """Serve `writes` as chunked frames (one read each, paced); return what the gateway
    forwards per read and the call's result."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for i, data in enumerate(writes):
            last = i == len(writes) - 1
            writer.write(chunk(data) + (b"0\r\n\r\n" if last else b""))  # the end with the last
            await writer.drain()
            await asyncio.sleep(0.02)
        await reader.read()

    forwarded: list[bytes] = []
    outcome = {}

    async def work(base: str) -> None:
        client = upstream_client()
        route = RouteTarget(id=1, name="r", base_url=base + "/v1", model="m", fingerprint="f")
        opened, result = await open_stream(client, route, "chat", b"{}", {}, capture=capture)
        assert isinstance(opened, Stream)
        async for data in opened.events(strip_usage=strip_usage):
            forwarded.append(data)
        outcome.update(result=result, done=opened.done, ended=opened.ended)
        await client.close()

    asyncio.run(serving(handler, work))
    return forwarded, outcome


def test_events_are_forwarded_as_they_came_and_accounted_for():
    writes = [delta("Hel") + delta("lo"), delta(" you", finish="stop") + USAGE + DONE]
    forwarded, outcome = stream_through(writes, strip_usage=False, capture=True)
    assert forwarded == writes
    result = outcome["result"]
    assert result.status is GenerationStatus.OK and outcome["done"] and outcome["ended"]
    assert (result.output_text, result.finish_reason, result.content_chunks) == (
        "Hello you",
        "stop",
        3,
    )
    assert (result.input_tokens, result.output_tokens, result.response_id) == (3, 4, "r1")
    assert result.ttft_s is not None and result.itl_max_s is not None and result.tpot_s


def test_the_usage_chunk_is_dropped_for_a_client_that_did_not_ask_for_it():
    writes = [delta("a"), delta("b", finish="length") + USAGE + DONE]
    forwarded, outcome = stream_through(writes, strip_usage=True)
    assert forwarded == [delta("a"), delta("b", finish="length") + DONE]
    assert outcome["result"].output_tokens == 4  # read, though not forwarded


def test_an_event_split_across_reads_is_held_until_complete():
    whole = delta("split")
    writes = [whole[:10], whole[10:] + DONE]
    forwarded, outcome = stream_through(writes, strip_usage=False, capture=True)
    assert forwarded == [whole + DONE]
    assert outcome["result"].output_text == "split"


@pytest.mark.parametrize(
    "odd",
    [
        b": keep-alive comment\n\n",
        b'event: message\ndata: {"id": "r1",\ndata: "choices": []}\n\n',
        b"data: 42\n\n",
    ],
    ids=["comment", "multi-line-data", "not-an-object"],
)
def test_reads_with_other_events_are_taken_one_by_one(odd):
    writes = [delta("a") + odd + delta("b") + DONE]
    forwarded, outcome = stream_through(writes, strip_usage=True, capture=True)
    assert forwarded == writes
    assert outcome["result"].output_text == "ab"
    assert outcome["result"].status is GenerationStatus.OK


def test_a_chunk_that_is_not_json_marks_the_call_an_error_but_is_forwarded():
    writes = [delta("a") + b"data: {not json\n\n" + DONE]
    forwarded, outcome = stream_through(writes, strip_usage=False)
    assert forwarded == writes
    assert outcome["result"].status is GenerationStatus.ERROR


def test_crlf_events_are_normalised():
    writes = [delta("a").replace(b"\n", b"\r\n") + DONE.replace(b"\n", b"\r\n")]
    forwarded, outcome = stream_through(writes, strip_usage=False, capture=True)
    assert forwarded == [delta("a") + DONE]
    assert outcome["result"].output_text == "a" and outcome["done"]


@pytest.mark.parametrize(
    ("writes", "expected"),
    [
        ([delta("a"), USAGE + DONE], [delta("a"), DONE]),
        ([delta("a") + USAGE + delta("b") + DONE], [delta("a") + delta("b") + DONE]),
        ([delta("a") + USAGE], [delta("a")]),
        ([delta("a") + USAGE + USAGE + DONE], [delta("a") + DONE]),
    ],
    ids=["usage-first-in-read", "usage-mid-read", "usage-last-no-done", "usage-twice"],
)
def test_usage_chunks_are_cut_wherever_they_sit(writes, expected):
    forwarded, outcome = stream_through(writes, strip_usage=True)
    assert forwarded == expected
    assert outcome["result"].output_tokens == 4


def test_an_answer_that_arrives_in_one_burst_has_no_tpot():
    # A tool call held back until complete: every event in one read, microseconds apart.
    function = {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    chunk = {"id": "r1", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": function}]}}]}  # fmt: skip
    call = b"data: " + orjson.dumps(chunk) + b"\n\n"
    writes = [call + delta("", finish="tool_calls") + USAGE + DONE]
    _forwarded, outcome = stream_through(writes, strip_usage=False, capture=True)
    result = outcome["result"]
    assert result.output_tokens == 4 and result.ttft_s is not None
    assert result.tpot_s is None  # undefined, not a few microseconds


def test_a_burst_split_into_events_of_one_read_has_no_tpot():
    writes = [delta("a") + delta("b") + delta("c", finish="stop") + USAGE + DONE]
    _forwarded, outcome = stream_through(writes, strip_usage=False, capture=True)
    assert outcome["result"].content_chunks == 3 and outcome["result"].tpot_s is None
