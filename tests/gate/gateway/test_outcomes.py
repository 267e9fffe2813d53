"""What the gateway records when a route hangs, a client leaves or the mirror queue is full."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from gate.db.enums import RolloutMode
from gate.engines.sim import SimProfile, create_sim_app
from gate.gateway.upstream import FIRST_BYTE_TIMEOUT
from gate.settings import Settings
from gate.telemetry import attributes as A
from tests.gate.gateway.conftest import ALIAS, gateway_stack, held
from tests.gate.gateway.test_proxy import MESSAGES, wait_until

# Every route client passes these (gate/gateway/transport.py).
pytestmark = pytest.mark.usefixtures("each_transport")

DEFAULT_UPSTREAM_TIMEOUT_S = Settings.model_fields["upstream_timeout_s"].default


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_canary_first_byte_timeout_covers_a_candidate_that_never_answers(tmp_path, stream):
    # The candidate accepts the connection and never sends a header; the upstream
    # timeout stays at its default (minutes), so only the first-byte bound can help.
    with gateway_stack(
        tmp_path,
        mode=RolloutMode.CANARY,
        candidate=SimProfile(failure="hang"),
        canary_first_byte_timeout_s=0.5,
        upstream_timeout_s=DEFAULT_UPSTREAM_TIMEOUT_S,
    ) as stack:
        # The client's own deadline is far below the upstream timeout.
        answer = stack.client(timeout=8.0).chat.completions.create(
            model=ALIAS, messages=MESSAGES, stream=stream
        )
        chunks = list(answer) if stream else [answer]
        assert chunks and len(stack.baseline_log.bodies) == 1
        (cand,) = stack.spans("candidate")
        assert cand.attributes[A.STATUS] == "fallback"
        assert "first byte" in cand.attributes[A.ERROR]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_client_that_leaves_mid_canary_blames_neither_route(tmp_path, stream):
    with gateway_stack(
        tmp_path,
        mode=RolloutMode.CANARY,
        candidate=SimProfile(failure="hang"),
        canary_first_byte_timeout_s=30.0,
    ) as stack:
        with pytest.raises(openai.APITimeoutError):
            answer = stack.client(timeout=0.5).chat.completions.create(
                model=ALIAS, messages=MESSAGES, stream=stream
            )
            list(answer) if stream else None
        assert wait_until(lambda: len(stack.spans("candidate")) == 1)
        (cand,) = stack.spans("candidate")
        assert cand.attributes[A.STATUS] == "cancelled"
        assert cand.attributes[A.FALLBACK] is False
        # No fallback for a client that is gone: the baseline is never called.
        assert stack.baseline_log.bodies == [] and stack.spans("baseline") == []
        text = httpx.get(stack.url + "/metrics").text
        assert 'cohort="candidate",route="spec",status="cancelled"} 1.0' in text


def test_a_client_that_leaves_mid_stream_is_cancelled_upstream_and_recorded(tmp_path):
    slow = SimProfile(tokens=200, token_interval_s=0.01)
    with gateway_stack(tmp_path, baseline=slow, sample_rate=0.0) as stack:
        with httpx.stream(
            "POST",
            stack.url + "/v1/chat/completions",
            json={"model": ALIAS, "messages": MESSAGES, "stream": True},
        ) as response:
            for _ in response.iter_raw():
                break
        assert wait_until(lambda: len(stack.spans("baseline")) == 1)
        (base,) = stack.spans("baseline")
        assert base.attributes[A.STATUS] == "cancelled"
        assert "disconnected" in base.attributes[A.ERROR]
        assert wait_until(lambda: stack.baseline_log.cancelled == 1), "upstream call not cancelled"


def test_a_mirror_queue_held_full_drops_instead_of_timing_out(tmp_path):
    # One mirror at a time, each call taking at least 1.2 s of a 4 s deadline. The candidate
    # holds the first call until all six are in the gateway (one running, five queued),
    # so the queue is full however slowly the requests came: the sixth cannot start before
    # four calls ran (>= 4.8 s after the release), past its deadline (<= 4 s after it).
    # Queue time is the gateway's, never the candidate's: it is dropped, not timed out.
    release, arrived = threading.Event(), []
    candidate = held(
        create_sim_app(SimProfile(ttft_s=1.2, spec_tokens=4, acceptance=0.7)), release, arrived
    )
    with gateway_stack(
        tmp_path,
        candidate_app=candidate,
        mirror_max_concurrency=1,
        mirror_max_queue=8,
        mirror_deadline_s=4.0,
    ) as stack:
        pool = stack.extra["app"].api.state.gateway.mirror
        client = stack.client()
        try:
            for _ in range(6):
                client.chat.completions.create(model=ALIAS, messages=MESSAGES)
            assert wait_until(lambda: pool.pending == 6 and len(arrived) == 1)
        finally:
            release.set()
        assert wait_until(lambda: len(stack.spans("candidate")) == 6, timeout=30.0)
        spans = sorted(stack.spans("candidate"), key=lambda s: s.start_time)
        statuses = [s.attributes[A.STATUS] for s in spans]
        assert "timeout" not in statuses and statuses.count("ok") >= 2, statuses
        assert "dropped" in statuses, statuses
        started = [s for s in spans if s.attributes[A.STATUS] == "ok"]
        waits = [s.attributes[A.MIRROR_QUEUE_S] for s in started]
        assert max(waits) >= 1.2, waits  # the second waited for the whole first call
        # A queued call's own time leaves out its wait: its 1.2 s, not the queue's too (the
        # first call's includes the candidate's hold, which is the candidate's).
        queued = list(zip(started, waits, strict=True))[1:]
        assert all(s.attributes[A.E2E_S] < 1.2 + w for s, w in queued), [
            (s.attributes[A.E2E_S], w) for s, w in queued
        ]
        text = httpx.get(stack.url + "/metrics").text
        assert f"specgate_gateway_mirror_queue_wait_seconds_count {float(len(started))}" in text


@pytest.mark.parametrize("reported", [True, False], ids=["engine_reports", "engine_silent"])
def test_non_streamed_timings_come_from_the_engine_or_nowhere(tmp_path, reported):
    profile = SimProfile(ttft_s=0.05, tokens=11, token_interval_s=0.002)
    engine = SimProfile(**{**profile.__dict__, "per_request_metrics": reported})
    with gateway_stack(tmp_path, baseline=engine, candidate=engine) as stack:
        stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES)
        list(stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES, stream=True))
        assert wait_until(lambda: len(stack.spans("candidate")) == 2)
        for span in stack.spans():
            attrs = span.attributes
            if not attrs[A.STREAM]:
                # No chunk arrives before the whole answer: the gateway measured no TTFT.
                assert A.TTFT_S not in attrs and A.TPOT_S not in attrs
            else:
                assert attrs[A.TTFT_S] > 0 and attrs[A.TPOT_S] >= 0
            if reported:
                assert attrs[A.ENGINE_TTFT_S] == pytest.approx(0.05)
                assert attrs[A.ENGINE_TPOT_S] == pytest.approx(0.002)
            else:
                assert A.ENGINE_TTFT_S not in attrs and A.ENGINE_TPOT_S not in attrs


def stalled_body_upstream() -> Starlette:
    """An engine that answers at once (head and first bytes), then stalls the body."""

    async def body() -> AsyncIterator[bytes]:
        yield b'{"id": "c1", "object": "chat.completion", '
        await asyncio.sleep(30)

    async def chat(_request: Request) -> StreamingResponse:
        return StreamingResponse(body(), media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def test_a_body_that_stalls_after_the_head_is_not_a_first_byte_timeout(tmp_path):
    # The head comes well inside the first-byte bound (at once, from a local engine: 1 s
    # leaves a loaded host more room than 0.3 s did); the body read times out after it.
    with gateway_stack(
        tmp_path,
        mode=RolloutMode.CANARY,
        candidate_app=stalled_body_upstream(),
        canary_first_byte_timeout_s=1.0,
        upstream_timeout_s=2.0,
    ) as stack:
        stack.client(timeout=8.0).chat.completions.create(model=ALIAS, messages=MESSAGES)
        (cand,) = stack.spans("candidate")
        assert cand.attributes[A.STATUS] == "fallback"
        assert cand.attributes[A.ERROR] != FIRST_BYTE_TIMEOUT
        assert cand.attributes[A.ERROR].startswith("timeout: no data from the upstream")


ODD_ANSWERS = {
    False: b'{"choices": ["x", {"index": 0, "message": "hi"}], "usage": null}',
    True: b'data: {"choices": ["x"]}\n\ndata: {"choices": 5}\n\ndata: [DONE]\n\n',
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_answer_of_an_odd_shape_reaches_the_client_as_the_route_wrote_it(tmp_path, stream):
    # Choices that are not objects are the route's business: forwarded, never a 500.
    async def odd(request: Request) -> StreamingResponse:
        kind = "text/event-stream" if stream else "application/json"
        return StreamingResponse(iter([ODD_ANSWERS[stream]]), media_type=kind)

    app = Starlette(routes=[Route("/v1/chat/completions", odd, methods=["POST"])])
    with gateway_stack(tmp_path, baseline_app=app, candidate_app=app) as stack:
        body = {"model": ALIAS, "messages": MESSAGES, "stream": stream}
        answer = httpx.post(f"{stack.url}/v1/chat/completions", json=body, timeout=10)
        assert answer.status_code == 200
        assert answer.content == ODD_ANSWERS[stream]
        assert wait_until(lambda: len(stack.spans("baseline")) == 1)
        assert stack.spans("baseline")[0].attributes[A.STATUS] == "error"  # not an answer
