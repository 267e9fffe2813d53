"""The gateway over real HTTP on 127.0.0.1, called with the openai client."""

from __future__ import annotations

import json
import os
import threading
import uuid

import httpx
import pytest

from gate.db.enums import RolloutMode
from gate.engines.sim import SimProfile, create_sim_app
from gate.gateway.http1 import Pool
from gate.gateway.httpx_transport import HttpxTransport
from gate.gateway.proxy import new_id
from gate.rollouts.states import Action
from gate.routing import service as routing_service
from gate.telemetry import attributes as A
from tests.gate.gateway.conftest import ALIAS, gateway_stack, held
from tests.waits import wait_until

# Every route client passes these (gate/gateway/transport.py).
pytestmark = pytest.mark.usefixtures("each_transport")

MESSAGES = [{"role": "user", "content": "Proofread: the cat sat on teh mat."}]


def strip_volatile(completion) -> dict:
    data = completion.model_dump()
    data.pop("created", None)
    return data


def test_non_streaming_answer_equals_the_route_called_directly(stack):
    through = stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES, seed=7)
    direct = stack.direct().chat.completions.create(model=ALIAS, messages=MESSAGES, seed=7)
    assert strip_volatile(through) == strip_volatile(direct)
    assert through.choices[0].message.content


def test_streaming_answer_equals_the_route_called_directly(stack):
    def collect(client):
        chunks = list(client.chat.completions.create(model=ALIAS, messages=MESSAGES, stream=True))
        return [strip_volatile(c) for c in chunks]

    through, direct = collect(stack.client()), collect(stack.direct())
    assert through == direct and len(through) == 32
    assert all(chunk["choices"] for chunk in through), (
        "usage chunk leaked to a client that did not ask"
    )


def test_client_that_asks_for_usage_gets_it(stack):
    chunks = list(
        stack.client().chat.completions.create(
            model=ALIAS, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].usage.completion_tokens == 32 and chunks[-1].choices == []


def test_shadow_mirrors_the_identical_body_and_records_a_pair(stack):
    stack.client().chat.completions.create(
        model=ALIAS,
        messages=MESSAGES,
        temperature=0,
        max_tokens=16,
        extra_body={"specgate": {"reference": "The cat sat on the mat.", "tenant": "acme"}},
    )
    assert wait_until(lambda: len(stack.spans("candidate")) == 1)
    assert stack.baseline_log.bodies == stack.candidate_log.bodies
    assert "specgate" not in stack.baseline_log.bodies[0]
    (pair,) = stack.pair_spans()
    (base,), (cand,) = stack.spans("baseline"), stack.spans("candidate")
    pair_id = pair.attributes[A.PAIR_ID]
    assert base.attributes[A.PAIR_ID] == cand.attributes[A.PAIR_ID] == pair_id
    assert json.loads(pair.attributes[A.REQUEST_INPUTS])["reference"] == "The cat sat on the mat."
    # In-flight counts name the gateway process that counted them (summed over replicas).
    assert pair.attributes[A.GATEWAY_REPLICA].split(":")[1] == str(os.getpid())
    assert cand.attributes[A.SPEC_ACCEPTED_TOKENS] > 0 and cand.attributes[A.SPEC_DRAFT_TOKENS] > 0
    assert base.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 16
    assert base.name == "chat sim" and base.attributes[A.GEN_AI_OPERATION_NAME] == "chat"
    assert base.attributes[A.TENANT] == "acme"
    assert (
        base.attributes[A.OUTPUT]
        == stack.client()
        .chat.completions.create(model=ALIAS, messages=MESSAGES, temperature=0, max_tokens=16)
        .choices[0]
        .message.content
    )
    # The route call's trace context went upstream, so vLLM's own span joins this trace.
    traceparent = stack.baseline_log.headers[0]["traceparent"]
    assert traceparent.split("-")[1] == format(base.context.trace_id, "032x")


def test_call_spans_carry_their_pair_s_start(stack):
    stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES, max_tokens=4)
    assert wait_until(lambda: len(stack.spans("candidate")) == 1)
    (pair,) = stack.pair_spans()
    calls = stack.spans()
    # The pair span starts at the stamped time; its calls' stubs take it as `created_at`.
    assert {s.attributes[A.PAIR_STARTED_NS] for s in calls} == {pair.start_time}
    assert all(s.start_time >= pair.start_time for s in calls)


def test_streaming_timings_are_recorded(tmp_path):
    profile = SimProfile(ttft_s=0.05, tokens=10, token_interval_s=0.01)
    with gateway_stack(tmp_path, candidate=profile) as stack:
        list(stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES, stream=True))
        assert wait_until(lambda: len(stack.spans("candidate")) == 1)
        (cand,) = stack.spans("candidate")
        # The engine's sleeps are lower bounds; a loaded host only adds to them, so no
        # upper bound (0.01 +- 0.008 failed under load 6): TPOT is the nine gaps after the
        # first token, each at least 0.01 s.
        ttft, tpot, e2e = (cand.attributes[k] for k in (A.TTFT_S, A.TPOT_S, A.E2E_S))
        assert ttft >= 0.05 and tpot >= 0.01 and e2e >= 0.05 + 9 * 0.01
        assert tpot == pytest.approx((e2e - ttft) / 9)


def ask_three(stack, stream: bool) -> None:
    """Three chat completions through the gateway, each answered whole."""
    for _ in range(3):
        answer = stack.client().chat.completions.create(
            model=ALIAS, messages=MESSAGES, stream=stream
        )
        if stream:
            assert len(list(answer)) == 32
        else:
            assert answer.choices[0].message.content


@pytest.mark.parametrize(
    ("failure", "status"),
    [
        ("down", "error"),
        ("status500", "error"),
        ("hang", "timeout"),
        ("garbage", "error"),
        ("broken_stream", "error"),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_failing_candidate_never_touches_the_primary(tmp_path, failure, status, stream):
    profile = None if failure == "down" else SimProfile(failure=failure)
    with gateway_stack(
        tmp_path, candidate=profile, candidate_down=failure == "down", mirror_deadline_s=0.5
    ) as stack:
        # That the primary never waits for its mirror is test_the_primary_never_waits_for_
        # its_mirror's (held mirrors, not a wall clock a loaded host can outlast).
        ask_three(stack, stream)
        assert wait_until(lambda: len(stack.spans("candidate")) == 3)
        # A non-streamed answer has no stream to break.
        expected = "ok" if failure == "broken_stream" and not stream else status
        found = {s.attributes[A.STATUS] for s in stack.spans("candidate")}
        if failure == "down":  # refused once, then dropped until a probe (test_route_down)
            assert expected in found and found <= {expected, "dropped"}
        else:
            assert found == {expected}
        assert {s.attributes[A.STATUS] for s in stack.spans("baseline")} == {"ok"}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_the_primary_never_waits_for_its_mirror(tmp_path, stream):
    # The candidate holds every call until the test releases it: the answers can only
    # come back while their mirrors are still in flight.
    release, arrived = threading.Event(), []
    candidate = held(create_sim_app(SimProfile(spec_tokens=4, acceptance=0.7)), release, arrived)
    with gateway_stack(tmp_path, candidate_app=candidate, mirror_deadline_s=60.0) as stack:
        try:
            ask_three(stack, stream)
            assert stack.extra["app"].api.state.gateway.mirror.pending == 3
            assert stack.spans("candidate") == []
        finally:
            release.set()
        assert wait_until(lambda: len(stack.spans("candidate")) == 3)
        assert {s.attributes[A.STATUS] for s in stack.spans("candidate")} == {"ok"}
        assert len(arrived) == 3


def test_canary_serves_the_candidate(tmp_path):
    with gateway_stack(tmp_path, mode=RolloutMode.CANARY) as stack:
        answer = stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES)
        assert answer.choices[0].message.content
        assert len(stack.candidate_log.bodies) == 1 and stack.baseline_log.bodies == []
        (cand,) = stack.spans("candidate")
        assert cand.attributes[A.MODE] == "canary" and cand.attributes[A.STATUS] == "ok"


@pytest.mark.parametrize("failure", ["down", "status500", "hang"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_canary_falls_back_to_the_baseline_transparently(tmp_path, failure, stream):
    profile = None if failure == "down" else SimProfile(failure=failure)
    with gateway_stack(
        tmp_path,
        mode=RolloutMode.CANARY,
        candidate=profile,
        candidate_down=failure == "down",
        canary_first_byte_timeout_s=0.5,
    ) as stack:
        answer = stack.client().chat.completions.create(
            model=ALIAS, messages=MESSAGES, stream=stream
        )
        chunks = list(answer) if stream else [answer]
        assert chunks and len(stack.baseline_log.bodies) == 1
        (cand,) = stack.spans("candidate")
        assert cand.attributes[A.STATUS] == "fallback" and cand.attributes[A.FALLBACK] is True
        # A streamed answer's span ends just after its last chunk reaches the client.
        assert wait_until(lambda: len(stack.spans("baseline")) == 1)
        (base,) = stack.spans("baseline")
        assert base.attributes[A.STATUS] == "ok"


def test_kill_stops_mirroring(stack):
    client = stack.client()
    client.chat.completions.create(model=ALIAS, messages=MESSAGES)
    assert wait_until(lambda: len(stack.candidate_log.bodies) == 1)
    with stack.factory() as session, session.begin():
        routing_service.change_state(
            session,
            rollout_id=stack.rollout_id,
            action=Action.KILL,
            actor="key:oncall",
            reason="test",
            publisher=stack.bus,
        )
    assert wait_until(lambda: stack.routing.lookup(ALIAS).state.value == "killed", timeout=10)
    for _ in range(5):
        client.chat.completions.create(model=ALIAS, messages=MESSAGES)
    # A mirror call is submitted before the client's answer: none pending, none was sent.
    assert wait_until(stack.mirrors_idle, timeout=10)
    assert len(stack.candidate_log.bodies) == 1 and len(stack.baseline_log.bodies) == 6


def test_stale_routing_state_serves_baseline_only(tmp_path):
    with gateway_stack(tmp_path, state_stale_after_s=0.3) as stack:
        stack.routing._load = lambda: (_ for _ in ()).throw(RuntimeError("db down"))
        assert wait_until(stack.routing.is_stale, timeout=10)
        stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES)
        assert wait_until(stack.mirrors_idle, timeout=10)
        assert stack.candidate_log.bodies == [] and len(stack.baseline_log.bodies) == 1


def test_bad_requests_get_clear_openai_errors(stack):
    url = stack.url + "/v1/chat/completions"
    cases = [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (json.dumps({"messages": MESSAGES}).encode(), 400, "'model' is required"),
        (
            json.dumps({"model": "nope", "messages": MESSAGES}).encode(),
            404,
            "'nope' does not exist",
        ),
        (
            json.dumps({"model": ALIAS, "messages": MESSAGES, "specgate": 3}).encode(),
            400,
            "must be an object",
        ),
        (
            json.dumps({"model": ALIAS, "messages": MESSAGES, "specgate": {"x": 1}}).encode(),
            400,
            "unknown 'specgate' fields",
        ),
        (
            json.dumps(
                {"model": ALIAS, "messages": MESSAGES, "specgate": {"tests": {"memory_mb": -1}}}
            ).encode(),
            400,
            "'specgate.tests.memory_mb' must be a finite number of at least 1",
        ),
        (json.dumps({"model": ALIAS}).encode(), 400, "'messages' is required"),  # upstream 4xx
        (b"{" + b" " * 2_000_000 + b"}", 413, "exceeds"),
    ]
    for body, status, message in cases:
        response = httpx.post(url, content=body, headers={"content-type": "application/json"})
        assert response.status_code == status, (body[:40], response.text)
        assert message in response.json()["error"]["message"]


def test_models_and_metrics(stack):
    assert [m.id for m in stack.client().models.list()] == [ALIAS]
    stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES)
    assert wait_until(lambda: len(stack.spans("candidate")) == 1)
    text = httpx.get(stack.url + "/metrics").text
    assert (
        'specgate_gateway_route_calls_total{cohort="baseline",route="base",status="ok"} 1.0' in text
    )
    assert 'specgate_gateway_rollout_killed{alias="smol",rollout="1"} 0.0' in text


def test_request_and_pair_ids_are_distinct_version_4_uuids():
    ids = [new_id() for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    for text in ids[:500]:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, text)


def test_the_gateway_calls_routes_through_the_chosen_transport(stack, each_transport):
    stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES)
    client = stack.extra["app"].api.state.gateway.client
    assert type(client) is {"http1": Pool, "httpx": HttpxTransport}[each_transport]
