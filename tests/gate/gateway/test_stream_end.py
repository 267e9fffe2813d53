"""A streamed answer the client received in full is `ok`, even if the client closes the
connection the moment it has read the last event; leaving before the end is `cancelled`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from gate.telemetry import attributes as A
from tests.gate.gateway.conftest import ALIAS, gateway_stack
from tests.gate.gateway.test_proxy import MESSAGES, wait_until

# Every route client passes these (gate/gateway/transport.py).
pytestmark = pytest.mark.usefixtures("each_transport")

CHUNK = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"sim",'
    b'"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":%s}]}\n\n'
)


def lingering_upstream(linger_s: float) -> Starlette:
    """An engine that sends its whole answer and [DONE], then holds the body open a while
    before ending it (the end of a chunked body can come in a later read)."""

    async def events() -> AsyncIterator[bytes]:
        yield CHUNK % (b"hello", b"null")
        yield CHUNK % (b"", b'"stop"') + b"data: [DONE]\n\n"
        await asyncio.sleep(linger_s)

    async def chat(_request: Request) -> StreamingResponse:
        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def read_all_then_close(stack) -> str:
    stream = stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
    stream.response.close()
    return text


def test_closing_right_after_done_while_the_upstream_lingers_is_ok(tmp_path):
    with gateway_stack(tmp_path, baseline_app=lingering_upstream(5.0), sample_rate=0.0) as stack:
        assert read_all_then_close(stack) == "hello"
        assert wait_until(lambda: len(stack.spans("baseline")) == 1)
        (base,) = stack.spans("baseline")
        assert (base.attributes[A.STATUS], base.attributes.get(A.ERROR)) == ("ok", None)


def test_closing_right_after_the_last_event_is_ok_every_time(tmp_path):
    # The upstream's body ends a moment after [DONE]: the client's close races with it.
    runs = 30
    upstream = lingering_upstream(0.005)
    with gateway_stack(tmp_path, baseline_app=upstream, sample_rate=0.0) as stack:
        for _ in range(runs):
            assert read_all_then_close(stack)
        assert wait_until(lambda: len(stack.spans("baseline")) == runs)
        statuses = [s.attributes[A.STATUS] for s in stack.spans("baseline")]
        assert statuses == ["ok"] * runs
