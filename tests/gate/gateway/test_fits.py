"""Exactness fields of a route call: choice 0's alternatives gathered across a stream, and
computed in the worker thread, bounded, never losing a span."""

from __future__ import annotations

import json
import threading

import pytest

from gate.db.enums import GenerationStatus
from gate.exactness import exactness_fields
from gate.gateway.fits import FitWorker, fit_of
from gate.gateway.logprobs import Alternatives
from gate.gateway.observe import CallResult
from gate.routing.snapshot import ExactnessAsk

ASK = ExactnessAsk(top_logprobs=20, control_share=0.1, mode="raw")
TOP = {"a": -0.3, "b": -1.6, "c": -2.5}


def column_chunk(token: str, *, tops: bool = True) -> dict:
    logprobs = {"tokens": [token], "token_logprobs": [TOP[token]], "top_logprobs": [TOP]}
    if not tops:
        logprobs["top_logprobs"] = None
    return {"choices": [{"index": 0, "text": token, "logprobs": logprobs}]}


def chat_entry(token: str) -> dict:
    top = [{"token": t, "logprob": v} for t, v in TOP.items()]
    return {"token": token, "logprob": TOP[token], "top_logprobs": top}


def streamed(chunks: list[dict]) -> CallResult:
    result = CallResult()
    result.on_chunks(chunks, 0.0, capture=False)
    result.finish()
    return result


def test_streamed_completion_columns_stay_aligned_token_by_token():
    result = streamed([column_chunk("a"), column_chunk("b", tops=False), column_chunk("c")])
    assert result.alternatives is not None
    gathered = result.alternatives.logprobs()
    assert gathered == {
        "tokens": ["a", "b", "c"],
        "token_logprobs": [-0.3, -1.6, -2.5],
        "top_logprobs": [TOP, None, TOP],
    }
    fit = fit_of(ASK, {"temperature": 0.8}, result)
    assert fit is not None
    want = exactness_fields(gathered, temperature=0.8, mode="raw")
    assert want is not None and (want.tokens, want.skipped) == (2, 1)
    assert json.loads(fit() or "") == want.as_dict()


def test_streamed_chat_entries_make_the_answer_read_whole():
    deltas = [
        {
            "choices": [
                {"index": 0, "delta": {"content": t}, "logprobs": {"content": [chat_entry(t)]}}
            ]
        }
        for t in "abca"
    ]
    result = streamed(deltas)
    whole = {"content": [chat_entry(t) for t in "abca"]}
    assert result.alternatives is not None and result.alternatives.logprobs() == whole


def test_answers_the_test_cannot_read_give_no_fields():
    plain = {"content": [{"token": "a", "logprob": -0.3, "top_logprobs": []}]}
    result = streamed([{"choices": [{"index": 0, "delta": {}, "logprobs": plain}]}])
    assert fit_of(ASK, {"temperature": 0.8}, result) is None  # no alternatives
    two = Alternatives()
    for index in (0, 1):
        two.add({"index": index, "logprobs": {"content": [chat_entry("a")]}})
    assert two.logprobs() is None  # n > 1: not one answer
    read = streamed([column_chunk("a")])
    assert fit_of(None, {"temperature": 0.8}, read) is None  # the policy does not test
    assert fit_of(ASK, {"temperature": 0}, read) is None  # greedy
    assert fit_of(ASK, {}, read) is None  # no stated temperature
    read.fail(GenerationStatus.ERROR, "stream broke")
    assert fit_of(ASK, {"temperature": 0.8}, read) is None


def test_the_worker_ends_spans_off_the_caller_thread_and_never_loses_one(caplog):
    skipped: list[int] = []
    worker = FitWorker(max_pending=4, on_skipped=lambda: skipped.append(1))
    ended: list[tuple[str | None, str]] = []

    def end(value: str | None) -> None:
        ended.append((value, threading.current_thread().name))

    def broken() -> str | None:
        raise ValueError("malformed answer")

    worker.end_with(end, lambda: "fields")
    worker.end_with(end, broken)
    worker.close()
    assert [value for value, _ in ended] == ["fields", None]
    assert all(name.startswith("specgate-fits") for _, name in ended)
    assert "gateway.exactness_failed" in caplog.text
    worker.end_with(end, lambda: "late")  # after close: ended at once, without the fields
    assert ended[-1] == (None, threading.current_thread().name) and skipped == [1]


def test_a_full_worker_ends_the_span_at_once_without_the_fields():
    skipped: list[int] = []
    worker = FitWorker(max_pending=0, on_skipped=lambda: skipped.append(1))
    ended: list[str | None] = []
    worker.end_with(ended.append, lambda: pytest.fail("not computed"))
    assert ended == [None] and skipped == [1]
    worker.close()
