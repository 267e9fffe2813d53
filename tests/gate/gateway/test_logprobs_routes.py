"""Log-probabilities through the real gateway: who asks, streamed answers stripped byte for
byte and summarised, routes that reject them remembered, everything else untouched."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from gate.engines.sim import SimProfile
from gate.telemetry import attributes as A
from tests.gate.gateway.conftest import ALIAS, gateway_stack
from tests.waits import wait_until

pytestmark = pytest.mark.usefixtures("each_transport")

PARITY = {"stages": [100], "guardrails": {"output_parity": {"enabled": True}}}
NO_PARITY = {"stages": [100], "guardrails": {"output_parity": {"enabled": False}}}
MESSAGES = [{"role": "user", "content": "Proofread: the cat sat on teh mat."}]
SUM_OF_8 = -0.25 * (1 + 2 + 3 + 4) * 2  # the sim engine's made-up values, 8 tokens


def chat(stack: Any, **extra: Any) -> httpx.Response:
    body = {"model": ALIAS, "messages": MESSAGES, "max_tokens": 8, **extra}
    return httpx.post(f"{stack.url}/v1/chat/completions", json=body, timeout=10)


def chunks_of(response: httpx.Response) -> list[dict[str, Any]]:
    events = response.content.split(b"\n\n")
    return [orjson.loads(e[6:]) for e in events if e.startswith(b"data: {")]


def test_streamed_pairs_are_asked_summarised_and_stripped(tmp_path):
    with gateway_stack(tmp_path, policy=PARITY) as stack:
        answer = chat(stack, temperature=0.8, stream=True)
        assert answer.status_code == 200
        received = chunks_of(answer)
        assert "".join(c["choices"][0]["delta"]["content"] for c in received if c["choices"])
        assert all(c["logprobs"] is None for chunk in received for c in chunk["choices"])
        assert all(chunk.get("usage") is None for chunk in received)  # not asked: not shown
        # A streamed primary ends its span once the last byte is handed on: wait for both.
        assert wait_until(
            lambda: len(stack.spans("candidate")) == len(stack.spans("baseline")) == 1
        )
        # Asked alike for the sampled tokens' own; the candidate for alternatives too.
        asked = [{**body, "top_logprobs": 20} for body in stack.baseline_log.bodies]
        assert asked == stack.candidate_log.bodies
        assert stack.baseline_log.bodies[0]["logprobs"] is True
        for span in stack.spans("baseline") + stack.spans("candidate"):
            assert span.attributes[A.LOGPROB_TOKENS] == 8
            assert span.attributes[A.LOGPROB_SUM] == pytest.approx(SUM_OF_8)
        # A client that asks gets them, as the route sent them.
        mine = chunks_of(chat(stack, temperature=0.8, stream=True, logprobs=True))
        assert sum(len(c["choices"][0]["logprobs"]["content"]) for c in mine if c["choices"]) == 8
        # Completions: asked with `logprobs: 0` (the sampled tokens' own), columns stripped.
        body = {"model": ALIAS, "prompt": "Say hi", "max_tokens": 8, "temperature": 0.8}
        text = httpx.post(f"{stack.url}/v1/completions", json={**body, "stream": True})
        assert stack.baseline_log.bodies[-1]["logprobs"] == 0
        assert all(c["logprobs"] is None for chunk in chunks_of(text) for c in chunk["choices"])
        assert wait_until(lambda: len(stack.spans("baseline")) == 3)
        assert stack.spans("baseline")[-1].attributes[A.LOGPROB_TOKENS] == 8


def test_only_a_policy_that_tests_parity_asks_unless_the_setting_says_otherwise(tmp_path):
    for i, (policy, setting, asked) in enumerate(
        (
            (NO_PARITY, "auto", False),
            (None, "auto", True),  # the default policy tests parity
            (PARITY, "off", False),
            (NO_PARITY, "on", True),
        )
    ):
        (tmp_path / str(i)).mkdir()
        with gateway_stack(tmp_path / str(i), policy=policy, ask_logprobs=setting) as stack:
            assert chat(stack, temperature=0.8).status_code == 200
            assert ("logprobs" in stack.baseline_log.bodies[0]) is asked


@pytest.mark.parametrize("stream", [False, True])
def test_a_route_that_rejects_logprobs_is_retried_without_them_and_not_asked_again(
    tmp_path, stream
):
    rejecting = SimProfile(spec_tokens=4, acceptance=0.7, rejects_logprobs=True)
    with gateway_stack(tmp_path, policy=PARITY, candidate=rejecting) as stack:
        first = chat(stack, temperature=0.8, stream=stream)
        assert first.status_code == 200
        choices = [c for chunk in chunks_of(first) for c in chunk["choices"]] if stream else None
        assert all(c["logprobs"] is None for c in choices or first.json()["choices"])
        # A streamed primary ends its span once the last byte is handed on: wait for both.
        assert wait_until(
            lambda: len(stack.spans("candidate")) == len(stack.spans("baseline")) == 1
        )
        (cand,) = stack.spans("candidate")
        assert cand.attributes[A.LOGPROBS_REJECTED] is True
        assert cand.attributes[A.STATUS] == "ok" and A.LOGPROB_TOKENS not in cand.attributes
        assert [b.get("logprobs") for b in stack.candidate_log.bodies] == [True, None]
        (base,) = stack.spans("baseline")  # asked alike: it answered with them
        assert base.attributes[A.LOGPROB_TOKENS] == 8
        assert A.LOGPROBS_REJECTED not in base.attributes
        # The pair's route is remembered: neither side is asked any more.
        assert chat(stack, temperature=0.8, stream=not stream).status_code == 200
        assert wait_until(lambda: len(stack.candidate_log.bodies) == 3)
        assert "logprobs" not in stack.baseline_log.bodies[-1]
        assert "logprobs" not in stack.candidate_log.bodies[-1]


@pytest.mark.parametrize("stream", [False, True])
def test_the_client_never_sees_its_route_reject_our_logprobs(tmp_path, stream):
    rejecting = SimProfile(rejects_logprobs=True)
    with gateway_stack(tmp_path, policy=PARITY, baseline=rejecting) as stack:
        answer = chat(stack, temperature=0.8, stream=stream)
        assert answer.status_code == 200
        direct = httpx.post(
            f"{stack.baseline_url}/v1/chat/completions",
            json={"model": "sim", "messages": MESSAGES, "max_tokens": 8, "stream": stream},
        )
        if stream:
            text = [c["choices"][0]["delta"]["content"] for c in chunks_of(answer) if c["choices"]]
            assert text == [c["choices"][0]["delta"]["content"] for c in chunks_of(direct)]
        else:
            assert answer.json()["choices"] == direct.json()["choices"]
        assert wait_until(lambda: len(stack.spans("baseline")) == 1)
        (base,) = stack.spans("baseline")
        assert base.attributes[A.LOGPROBS_REJECTED] is True and base.attributes[A.STATUS] == "ok"
        assert chat(stack, temperature=0.8, stream=stream).status_code == 200
        assert "logprobs" not in stack.baseline_log.bodies[-1]  # the second request's


def test_a_client_error_is_not_taken_for_a_rejection_of_logprobs(tmp_path):
    with gateway_stack(tmp_path, policy=PARITY) as stack:
        bad = httpx.post(
            f"{stack.url}/v1/chat/completions",
            json={"model": ALIAS, "messages": [], "temperature": 0.8},
        )
        assert bad.status_code == 400  # the route's answer to the client's own request
        assert chat(stack, temperature=0.8).status_code == 200
        assert stack.baseline_log.bodies[-1]["logprobs"] is True  # still asked


# An upstream at the network edge that writes its JSON its own way (spaces, escapes).
SPACED = b'{"id": "r1", "choices": [{"index": 0, "delta": {"content": "h\\u00e9 \\"x\\""}, '
LOGPROBS = (
    b'{"content": [{"token": "h\\u00e9", "logprob": -0.5, "bytes": [104], "top_logprobs": []}]}'
)


def edge_chunk(logprobs: bytes) -> bytes:
    return b"data: " + SPACED + b'"logprobs": ' + logprobs + b', "finish_reason": null}]}\n\n'


USAGE = b'data: {"id": "r1", "choices": [], "usage": {"completion_tokens": 2}}\n\n'
DONE = b"data: [DONE]\n\n"
ANSWER = b'{"id": "r1", "choices": [{"index": 0, "message": {"content": "h\\u00e9"}, '


def edge_upstream(seen: list[dict[str, Any]]) -> Any:
    """Answer as written above, with logprobs when asked (null otherwise)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = orjson.loads(raw)
        seen.append(body)
        logprobs = LOGPROBS if body.get("logprobs") else b"null"
        if body.get("stream"):
            content = edge_chunk(logprobs) * 2 + USAGE + DONE
            kind = b"text/event-stream"
        else:
            content = ANSWER + b'"logprobs": ' + logprobs + b', "finish_reason": "stop"}]}'
            kind = b"application/json"
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]}
        )
        await send({"type": "http.response.body", "body": content})

    return app


def test_streamed_chunks_change_only_where_logprobs_were_and_others_not_at_all(tmp_path):
    seen: list[dict[str, Any]] = []
    app = edge_upstream(seen)
    with gateway_stack(tmp_path, policy=PARITY, baseline_app=app, candidate_app=app) as stack:
        usage = {"stream_options": {"include_usage": True}, "stream": True}
        sampled = chat(stack, temperature=0.8, **usage)
        assert seen[0]["logprobs"] is True
        assert sampled.content == edge_chunk(b"null") * 2 + USAGE + DONE
        # A streamed primary ends its span once the last byte is handed on: wait for both.
        assert wait_until(
            lambda: len(stack.spans("candidate")) == len(stack.spans("baseline")) == 1
        )
        assert stack.spans("baseline")[0].attributes[A.LOGPROB_TOKENS] == 2
        # Greedy requests are not sampled pairs: asked nothing, answered byte for byte.
        for extra in (usage, {}):
            before = len(seen)
            greedy = chat(stack, temperature=0, **extra)
            assert wait_until(lambda before=before: len(seen) == before + 2)
            assert all("logprobs" not in body for body in seen[before:])
            whole = ANSWER + b'"logprobs": null, "finish_reason": "stop"}]}'
            assert greedy.content == (edge_chunk(b"null") * 2 + USAGE + DONE if extra else whole)


def strict_upstream(seen: list[dict[str, Any]]) -> Any:
    """Validate like vLLM and OpenAI: `top_logprobs` without `logprobs` is a 400."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = orjson.loads(raw)
        seen.append(body)
        if body.get("top_logprobs") is not None and not body.get("logprobs"):
            status, content = 400, b'{"error": "top_logprobs needs logprobs"}'
        else:
            status, content = 200, ANSWER + b'"logprobs": null, "finish_reason": "stop"}]}'
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    return app


def test_a_request_the_route_would_refuse_is_not_made_valid_by_our_logprobs(tmp_path):
    # `top_logprobs` alone is the client's mistake: adding `logprobs` would turn the
    # route's 400 into an answer, for sampled pairs only.
    seen: list[dict[str, Any]] = []
    app = strict_upstream(seen)
    with gateway_stack(tmp_path, policy=PARITY, baseline_app=app, candidate_app=app) as stack:
        answer = chat(stack, temperature=0.8, top_logprobs=2)
        assert answer.status_code == 400
        assert all("logprobs" not in body for body in seen)
