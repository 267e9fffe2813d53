"""Per-token exactness through the real gateway: who is asked for `top_logprobs`, the
fields on the call's span, and the client's answer as it asked for it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import orjson
import pytest

from gate.db.enums import RolloutMode
from gate.exactness import exactness_fields
from gate.gateway.logprobs import strip_events, strip_json
from gate.telemetry import attributes as A
from tests.gate.gateway.conftest import ALIAS, Stack, gateway_stack
from tests.waits import wait_until

MESSAGES = [{"role": "user", "content": "Proofread: the cat sat on teh mat."}]
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def policy(**exactness: Any) -> dict[str, Any]:
    return {"stages": [100], "guardrails": {"exactness": exactness}}


def body_of(endpoint: str, **extra: Any) -> dict[str, Any]:
    asked = {"messages": MESSAGES} if endpoint == "chat" else {"prompt": "Say hi"}
    return {"model": ALIAS, "max_tokens": 8, **asked, **extra}


def send(stack: Stack, endpoint: str, **extra: Any) -> httpx.Response:
    body = body_of(endpoint, **extra)
    return httpx.post(stack.url + PATHS[endpoint], json=body, timeout=10)


def choices_of(response: httpx.Response, *, stream: bool) -> list[dict[str, Any]]:
    if not stream:
        return list(response.json()["choices"])
    events = response.content.split(b"\n\n")
    chunks = [orjson.loads(e[6:]) for e in events if e.startswith(b"data: {")]
    return [choice for chunk in chunks for choice in chunk["choices"]]


def expected_fields(stack: Stack, body: dict[str, Any], endpoint: str) -> dict[str, Any]:
    """What the public function makes of the route's own answer to the body it was sent."""
    direct = {**body, "model": "sim", "stream": False}
    answer = httpx.post(stack.baseline_url + "/v1" + PATHS[endpoint][3:], json=direct).json()
    fit = exactness_fields(answer["choices"][0]["logprobs"], temperature=0.8, mode="raw")
    assert fit is not None and fit.tokens == 8
    return fit.as_dict()


def both_spans(stack: Stack, count: int = 1) -> bool:
    return len(stack.spans("baseline")) == len(stack.spans("candidate")) == count


@pytest.mark.usefixtures("each_transport")
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.parametrize("stream", [False, True])
def test_the_candidate_is_asked_for_alternatives_and_its_span_carries_the_fields(
    tmp_path, endpoint, stream
):
    with gateway_stack(tmp_path, policy=policy(control_share=0.0)) as stack:
        answer = send(stack, endpoint, temperature=0.8, stream=stream)
        assert answer.status_code == 200
        # The client asked for no log-probabilities: it sees none, alternatives and all.
        assert all(c["logprobs"] is None for c in choices_of(answer, stream=stream))
        assert b"top_logprobs" not in answer.content
        assert wait_until(lambda: both_spans(stack))
        (base_body,), (cand_body,) = stack.baseline_log.bodies, stack.candidate_log.bodies
        if endpoint == "chat":
            assert (cand_body["logprobs"], cand_body["top_logprobs"]) == (True, 20)
            assert base_body["logprobs"] is True and "top_logprobs" not in base_body
        else:
            assert (cand_body["logprobs"], base_body["logprobs"]) == (20, 0)
        (base,), (cand,) = stack.spans("baseline"), stack.spans("candidate")
        want = expected_fields(stack, cand_body, endpoint)
        assert json.loads(cand.attributes[A.EXACTNESS]) == want
        assert A.EXACTNESS not in base.attributes
        assert cand.attributes[A.LOGPROB_TOKENS] == base.attributes[A.LOGPROB_TOKENS] == 8


@pytest.mark.parametrize("stream", [False, True])
def test_a_canary_answers_its_client_without_the_alternatives_it_was_asked_for(tmp_path, stream):
    with gateway_stack(tmp_path, mode=RolloutMode.CANARY) as stack:
        answer = send(stack, "chat", temperature=0.8, stream=stream)
        assert answer.status_code == 200 and b"top_logprobs" not in answer.content
        assert all(c["logprobs"] is None for c in choices_of(answer, stream=stream))
        assert wait_until(lambda: len(stack.spans("candidate")) == 1)
        (cand_body,) = stack.candidate_log.bodies
        assert cand_body["top_logprobs"] == 20 and stack.baseline_log.bodies == []
        (cand,) = stack.spans("candidate")
        assert json.loads(cand.attributes[A.EXACTNESS]) == expected_fields(stack, cand_body, "chat")


def test_the_baseline_is_asked_on_the_control_share_and_reads_the_same_way(tmp_path):
    with gateway_stack(tmp_path, policy=policy(control_share=1.0)) as stack:
        assert send(stack, "chat", temperature=0.8).status_code == 200
        assert wait_until(lambda: both_spans(stack))
        assert stack.baseline_log.bodies == stack.candidate_log.bodies  # asked alike
        assert stack.baseline_log.bodies[0]["top_logprobs"] == 20
        (base,), (cand,) = stack.spans("baseline"), stack.spans("candidate")
        assert base.attributes[A.EXACTNESS] == cand.attributes[A.EXACTNESS]


def test_the_control_share_is_decided_by_the_request_and_holds_for_it(tmp_path):
    with gateway_stack(tmp_path, policy=policy(control_share=0.5)) as stack:
        asked = []
        for i in range(12):
            for _ in range(2):  # the same request twice: asked the same way
                body = {"messages": [{"role": "user", "content": f"request {i}"}]}
                assert send(stack, "chat", temperature=0.8, **body).status_code == 200
            # The baseline answers the client (shadow): its bodies are in before the answer.
            first, again = stack.baseline_log.bodies[-2:]
            assert ("top_logprobs" in first) == ("top_logprobs" in again)
            asked.append("top_logprobs" in first)
        assert any(asked) and not all(asked)


def test_a_policy_without_exactness_asks_for_no_alternatives(tmp_path):
    with gateway_stack(tmp_path, policy=policy(enabled=False, control_share=1.0)) as stack:
        assert send(stack, "chat", temperature=0.8).status_code == 200
        assert wait_until(lambda: both_spans(stack))
        assert stack.candidate_log.bodies == stack.baseline_log.bodies
        assert stack.candidate_log.bodies[0]["logprobs"] is True  # parity still asks
        assert "top_logprobs" not in stack.candidate_log.bodies[0]
        assert all(A.EXACTNESS not in s.attributes for s in stack.spans())


@pytest.mark.parametrize("unpairable", [{"seed": 7}, {"n": 2}])
def test_a_request_that_cannot_make_a_pair_is_not_asked_for_logprobs(tmp_path, unpairable):
    with gateway_stack(tmp_path, policy=policy(control_share=1.0)) as stack:
        assert send(stack, "chat", temperature=0.8, **unpairable).status_code == 200
        assert wait_until(lambda: both_spans(stack))
        for body in stack.baseline_log.bodies + stack.candidate_log.bodies:
            assert "logprobs" not in body and "top_logprobs" not in body
        assert all(A.LOGPROB_TOKENS not in s.attributes for s in stack.spans())
        # The same request with neither is asked on both sides.
        assert send(stack, "chat", temperature=0.8).status_code == 200
        assert wait_until(lambda: both_spans(stack, 2))
        assert stack.baseline_log.bodies[-1]["top_logprobs"] == 20


def test_a_client_that_asks_for_alternatives_gets_them_and_the_span_reads_them(tmp_path):
    with gateway_stack(tmp_path, policy=policy(control_share=0.0)) as stack:
        answer = send(stack, "chat", temperature=0.8, logprobs=True, top_logprobs=3)
        content = answer.json()["choices"][0]["logprobs"]["content"]
        assert len(content) == 8 and all(len(e["top_logprobs"]) == 3 for e in content)
        assert wait_until(lambda: both_spans(stack))
        assert stack.baseline_log.bodies == stack.candidate_log.bodies  # left alone
        assert stack.candidate_log.bodies[0]["top_logprobs"] == 3
        fit = exactness_fields({"content": content}, temperature=0.8, mode="raw")
        assert fit is not None
        for span in stack.spans():
            assert json.loads(span.attributes[A.EXACTNESS]) == fit.as_dict()


def test_strip_nulls_the_alternatives_with_the_rest_of_logprobs():
    entry = {"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "a", "logprob": -0.1}]}
    chunk = {"choices": [{"index": 0, "delta": {"content": "a"}, "logprobs": {"content": [entry]}}]}
    events = b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n"
    stripped = strip_events(events)
    assert b"top_logprobs" not in stripped
    assert orjson.loads(stripped.split(b"\n\n")[0][6:])["choices"][0]["logprobs"] is None
    whole = {"choices": [{"index": 0, "message": {}, "logprobs": {"content": [entry]}}]}
    assert b"top_logprobs" not in strip_json(orjson.dumps(whole))
