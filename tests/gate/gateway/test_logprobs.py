"""Log-probabilities on sampled pairs' calls: asked alike, summarised, stripped for the client."""

from __future__ import annotations

import orjson
import pytest

from gate.gateway.logprobs import (
    RejectingRoutes,
    ask,
    strip_json,
    summarise,
    wants_logprobs,
)

CHAT = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.8}


def chat_answer(logprobs: list[float] | None, completion_tokens: int) -> dict:
    content = (
        None
        if logprobs is None
        else [{"token": "a", "logprob": v, "bytes": [97], "top_logprobs": []} for v in logprobs]
    )
    return {
        "id": "x",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "a" * completion_tokens},
                "logprobs": None if content is None else {"content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"completion_tokens": completion_tokens},
    }


def test_ask_leaves_a_client_request_alone_and_adds_logprobs_otherwise():
    assert not wants_logprobs(CHAT)
    assert ask(CHAT) == {**CHAT, "logprobs": True}
    mine = {**CHAT, "logprobs": True, "top_logprobs": 3}
    assert wants_logprobs(mine) and ask(mine) is mine
    legacy = {"prompt": "hi"}
    assert ask(legacy) == {"prompt": "hi", "logprobs": 0}
    assert CHAT.get("logprobs") is None  # never mutated


def test_strip_removes_what_we_asked_for_and_keeps_the_rest():
    answer = chat_answer([-0.5, -1.5], 2)
    stripped = orjson.loads(strip_json(orjson.dumps(answer)))
    assert stripped["choices"][0]["logprobs"] is None
    assert stripped["choices"][0]["message"] == answer["choices"][0]["message"]
    assert stripped["usage"] == answer["usage"]
    assert strip_json(b"not json") == b"not json"


def test_summary_keeps_counts_and_sums_and_sees_incomplete_logprobs():
    full = summarise(chat_answer([-0.5, -1.5], 2))
    assert full is not None and full.complete and full.mean == pytest.approx(-1.0)
    # llama.cpp with speculation: one entry per verify step.
    partial = summarise(chat_answer([-0.5], 2))
    assert partial is not None and not partial.complete
    assert summarise(chat_answer(None, 2)) is None
    legacy = {"choices": [{"logprobs": {"token_logprobs": [-1.0, -3.0]}}]}
    summary = summarise(legacy)
    assert summary is not None and summary.mean == pytest.approx(-2.0) and summary.complete


def test_a_route_that_rejects_our_logprobs_is_not_asked_again():
    routes = RejectingRoutes()
    # Rejected again without our logprobs: the client's own request was bad.
    routes.rejected(2, "base", answered_without=400)
    routes.rejected(2, "base", answered_without=None)  # unreachable on the retry
    assert routes.may_ask(1) and routes.may_ask(2)
    routes.rejected(1, "cand", answered_without=200)  # answered without them: ours
    assert not routes.may_ask(1) and routes.may_ask(2)


def test_a_route_call_keeps_the_summary_for_the_collector():
    from gate.gateway.observe import CallResult
    from gate.gateway.spans import _outcome
    from gate.telemetry import attributes as a

    result = CallResult()
    result.on_response(chat_answer([-0.5, -1.5, -1.0], 3), capture=False)
    result.finish()
    assert (result.logprob_tokens, result.logprob_sum) == (3, pytest.approx(-3.0))
    span = _outcome(result, fallback=False)
    assert (span[a.LOGPROB_TOKENS], span[a.LOGPROB_SUM]) == (3, pytest.approx(-3.0))
    plain = CallResult()
    plain.on_response(chat_answer(None, 3), capture=False)
    assert plain.logprob_tokens is None and plain.logprob_sum is None
    assert a.LOGPROB_SUM not in _outcome(plain, fallback=False)


def test_sampled_pairs_are_asked_and_the_client_gets_what_it_asked(tmp_path):
    from gate.telemetry import attributes as a
    from tests.gate.gateway.conftest import ALIAS, gateway_stack
    from tests.waits import wait_until

    messages = [{"role": "user", "content": "Proofread: the cat sat on teh mat."}]
    with gateway_stack(tmp_path, ask_logprobs="on") as stack:
        answer = stack.client().chat.completions.create(
            model=ALIAS, messages=messages, temperature=0.8, max_tokens=8
        )
        assert answer.choices[0].logprobs is None  # the client did not ask
        assert wait_until(lambda: len(stack.spans("candidate")) == 1)
        assert all(body.get("logprobs") is True for body in stack.baseline_log.bodies)
        # The candidate is asked for alternatives too (the default policy tests exactness).
        asked = [{**body, "top_logprobs": 20} for body in stack.baseline_log.bodies]
        assert asked == stack.candidate_log.bodies
        (base,), (cand,) = stack.spans("baseline"), stack.spans("candidate")
        for span in (base, cand):
            assert span.attributes[a.LOGPROB_TOKENS] == 8
            assert span.attributes[a.LOGPROB_SUM] == pytest.approx(-0.25 * (1 + 2 + 3 + 4) * 2)
        mine = stack.client().chat.completions.create(
            model=ALIAS, messages=messages, temperature=0.8, max_tokens=8, logprobs=True
        )
        assert len(mine.choices[0].logprobs.content) == 8  # asked: kept
        # A request that states no temperature is not a sampled pair: left as it is.
        list(
            stack.client().chat.completions.create(
                model=ALIAS, messages=messages, max_tokens=4, stream=True
            )
        )
        assert "logprobs" not in stack.baseline_log.bodies[-1]
