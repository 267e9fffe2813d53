"""Groundedness beyond extractive QA: task kinds, calibrated scores, per-kind thresholds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluators.base import GenerationView, RequestView
from evaluators.groundedness import GroundednessEvaluator
from evaluators.grounding_score import task_kind
from evaluators.registry import build_evaluators
from gate.errors import ConfigError

KNOWLEDGE = (
    "Iron Man is starring Robert Downey Jr. Zodiac is a crime film starring Jake Gyllenhaal."
)
HISTORY = [
    {"role": "user", "content": "Do you like Iron Man?"},
    {"role": "assistant", "content": "Sure do! Robert Downey Jr. is a favourite."},
    {"role": "user", "content": "Did you know he was in Zodiac too?"},
]
DIALOGUE = RequestView(body={"messages": HISTORY}, inputs={"context": [KNOWLEDGE]})
DOCUMENT = (
    "The council approved a budget of 4.2 million dollars on Tuesday. The mayor, Ana Ruiz, "
    "said the money would repair 12 bridges before winter."
)


def request(question: str, **inputs: object) -> RequestView:
    return RequestView(
        body={"messages": [{"role": "user", "content": question}]},
        inputs={"context": [DOCUMENT], **inputs},
    )


def scored(text: str, req: RequestView, evaluator: GroundednessEvaluator | None = None):
    return (evaluator or GroundednessEvaluator()).evaluate(GenerationView("c", output=text), req)


def test_the_task_kind_comes_from_the_policy_or_the_request():
    assert task_kind(DIALOGUE) == "dialogue"
    assert task_kind(request("Summarise this for me.")) == "summary"
    assert task_kind(request("How many bridges?")) == "qa"
    assert task_kind(request("How many bridges?"), "dialogue") == "dialogue"


def test_a_dialogue_reply_is_grounded_in_the_knowledge_and_an_invented_co_star_scores_lower():
    right = scored("I didn't know that! Jake Gyllenhaal starred in it as well.", DIALOGUE)
    wrong = scored("Yes, he starred in Zodiac with Tom Hanks and Meryl Streep.", DIALOGUE)
    assert right.details["task"] == "dialogue" and right.passed
    assert wrong.score is not None and right.score is not None and wrong.score < right.score
    assert wrong.details["per_claim"][0]["missing_entities"] == ["Tom Hanks", "Meryl Streep"]


def test_a_number_paraphrased_in_a_summary_lowers_its_score_but_fails_a_qa_answer():
    text = "Ana Ruiz said the budget of 4,200,000 dollars would repair 12 bridges."
    summary = scored(text, request("Summarise the news."))
    assert summary.passed and summary.details["unsupported"] == [text]
    assert not scored(text, request("What did the mayor say?")).passed


def test_the_score_is_a_calibrated_probability_that_falls_with_unsupported_content():
    req = request("Summarise the news.")
    faithful = scored("The council approved a budget of 4.2 million dollars.", req).score
    invented = scored("The council approved a budget of 9 million dollars for new schools.", req)
    assert faithful is not None and invented.score is not None
    assert 0.0 < invented.score < faithful < 1.0


def test_the_policy_sets_thresholds_per_kind_and_rejects_unknown_kinds_of_task():
    req = request("Summarise the news.")
    text = "The council approved a budget of 4.2 million dollars."
    strict = GroundednessEvaluator.from_options({"thresholds": {"summary": 0.999}})
    assert scored(text, req).passed and not scored(text, req, strict).passed
    assert scored(text, req, strict).details["threshold"] == 0.999
    with pytest.raises(ConfigError):
        build_evaluators({"evaluators": {"groundedness": {"task": "poems"}}})


def test_the_bench_scores_any_jsonl_of_rows_blind(tmp_path: Path):
    rows = tmp_path / "rows.jsonl"
    lines = []
    for i in range(40):
        right = {"answer": "The mayor is Ana Ruiz.", "label": 1}
        wrong = {"answer": f"The mayor is Tom Baker, elected in {1990 + i}.", "label": 0}
        for row in (right, wrong):
            lines.append(json.dumps({"context": DOCUMENT, "question": "Who?", **row}))
    rows.write_text("\n".join(lines))
    bench = Path(__file__).parents[2] / "bench" / "groundedness_halueval.py"
    out = subprocess.run(
        [sys.executable, str(bench), "--rows", str(rows), "--json", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ},
    )
    report = json.loads((tmp_path / "r.json").read_text())["quality"]["rows"]
    assert report["answers"] == 80 and report["groundedness"]["overall"] == 1.0
    assert report["false_fail_right"] == 0.0 and "| rows | 80 | groundedness |" in out.stdout


def test_a_word_that_only_opens_the_sentence_is_not_part_of_the_name():
    reply = scored("Actually Robert Downey Jr. was in Zodiac.", DIALOGUE)
    assert reply.details["per_claim"][0]["missing_entities"] == []
    invented = scored("Actually Tom Hanks was in Zodiac.", DIALOGUE)
    assert invented.details["per_claim"][0]["missing_entities"] == ["Actually Tom Hanks"]


def test_a_segment_can_carry_its_own_task_kind_and_threshold():
    req = request("How many bridges?", segment="news-digest")
    text = "The council approved a budget of 4.2 million dollars."
    policy = {"tasks": {"news-digest": "summary"}, "thresholds": {"news-digest": 0.42}}
    result = scored(text, req, GroundednessEvaluator.from_options(policy))
    assert result.details["task"] == "summary" and result.details["threshold"] == 0.42
    assert scored(text, req).details["task"] == "qa"
    with pytest.raises(ConfigError):
        build_evaluators({"evaluators": {"groundedness": {"thresholds": {"qa": 1.5}}}})
