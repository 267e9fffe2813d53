"""The optional signals, wired through their edges: a fake encoder, a mock HTTP judge."""

from __future__ import annotations

import json

import httpx
import numpy as np

from evaluators.base import GenerationView, RequestView
from evaluators.groundedness import GroundednessEvaluator
from evaluators.grounding_extras import EmbeddingSignal, JudgeSignal

REQUEST = RequestView(inputs={"context": "The bridge opened in 1932. It spans 503 metres."})
ANSWER = GenerationView(
    cohort="candidate", output="The bridge opened in 1932. It spans 503 metres."
)


def test_off_by_default():
    evaluator = GroundednessEvaluator.from_options({})
    assert evaluator.signals == []
    assert all(not c["signals"] for c in evaluator.evaluate(ANSWER, REQUEST).details["per_claim"])


def test_embedding_similarity_is_blended_into_each_claim():
    # A bag-of-letters "embedding": enough to tell related from unrelated text.
    def encode(texts):
        return np.array(
            [[t.lower().count(c) for c in "abcdefghijklmnopqrstuvwxyz0123456789"] for t in texts],
            dtype=float,
        )

    evaluator = GroundednessEvaluator(signals=[EmbeddingSignal(encode=encode, min_similarity=0.99)])
    result = evaluator.evaluate(ANSWER, REQUEST)
    sims = [c["signals"]["embedding_similarity"] for c in result.details["per_claim"]]
    assert sims == [1.0, 1.0] and result.passed


def judge_transport(verdicts, seen):
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append({**json.loads(request.content), "auth": request.headers.get("authorization")})
        content = json.dumps({"supported": verdicts})
        return httpx.Response(200, json={"choices": [{"message": {"content": content}}]})

    return httpx.MockTransport(handle)


def test_a_judge_can_reject_a_claim_the_lexical_signals_accepted(monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    seen = []
    client = httpx.Client(transport=judge_transport([True, False], seen))
    judge = JudgeSignal(
        base_url="http://judge.invalid/v1", model="m", api_key_env="JUDGE_KEY", client=client
    )
    result = GroundednessEvaluator(signals=[judge]).evaluate(ANSWER, REQUEST)
    assert not result.passed and result.details["unsupported"] == ["It spans 503 metres."]
    assert seen[0]["auth"] == "Bearer sk-test"
    assert (
        seen[0]["model"] == "m" and "2. It spans 503 metres." in seen[0]["messages"][0]["content"]
    )


def test_a_judge_that_errors_leaves_the_deterministic_result_alone():
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(503)))
    judge = JudgeSignal(base_url="http://judge.invalid/v1", model="m", client=client)
    result = GroundednessEvaluator(signals=[judge]).evaluate(ANSWER, REQUEST)
    assert result.passed
    assert "HTTPStatusError" in result.details["per_claim"][0]["signals"]["judge_error"]
