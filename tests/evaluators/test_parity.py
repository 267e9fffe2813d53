"""Greedy parity: equality, first divergence, finish and stop parity, length ratio."""

from __future__ import annotations

import pytest

from evaluators.base import GenerationView, RequestView, run_pair_evaluator
from evaluators.parity import GreedyParityEvaluator, first_difference

TEXT = "The capital of Norway is Oslo. It lies at the head of the Oslofjord."
GREEDY = RequestView(body={"temperature": 0})


def side(cohort: str, text: str = TEXT, finish: str = "stop", tokens=None, **extra):
    return GenerationView(
        cohort=cohort, output=text, finish_reason=finish, output_tokens=tokens, **extra
    )


def compare(baseline, other):
    return run_pair_evaluator(GreedyParityEvaluator(), baseline, other)


def test_identical_greedy_outputs_pass():
    result = compare(side("baseline", tokens=17), side("candidate", tokens=17))
    assert result.passed and result.score == 1.0
    assert result.details["exact_match"] and result.details["first_diff_token"] is None
    assert result.details["length_ratio"] == 1.0


def test_a_divergence_reports_where_it_starts_in_words_and_characters():
    drifted = TEXT.replace("It lies at", "It sits at")
    result = compare(side("baseline"), side("candidate", drifted))
    assert not result.passed
    assert result.details["first_diff_token"] == 7
    assert result.details["first_diff_char"] == TEXT.index("lies")
    assert result.score == pytest.approx(7 / 14)


def test_a_longer_answer_diverges_where_the_shorter_one_ends():
    longer = TEXT + " Population: 709,000."
    result = compare(side("baseline", tokens=17), side("candidate", longer, tokens=23))
    assert result.details["first_diff_char"] == len(TEXT)
    assert result.details["first_diff_token"] == 14
    assert result.details["length_ratio"] == pytest.approx(23 / 17, abs=1e-6)


def test_same_text_but_different_finish_reason_fails():
    result = compare(side("baseline"), side("candidate", finish="length"))
    assert not result.passed and result.details["exact_match"]
    assert result.details["finish_reason_match"] is False


def test_same_text_but_a_different_stop_sequence_fails():
    a = side("baseline", output_extra={"stop_reason": "\n\n"})
    b = side("candidate", output_extra={"stop_reason": "</answer>"})
    result = compare(a, b)
    assert result.details["finish_reason_match"] and not result.details["stop_reason_match"]
    assert not result.passed


def test_it_applies_to_greedy_pairs_only():
    evaluator = GreedyParityEvaluator()
    pair = [side("baseline"), side("candidate")]
    assert evaluator.applies(GREEDY, pair)
    assert not evaluator.applies(RequestView(body={"temperature": 0.7}), pair)
    # Without a captured body the sides' recorded temperature decides.
    greedy_sides = [side("baseline", temperature=0.0), side("control", temperature=0.0)]
    assert evaluator.applies(RequestView(), greedy_sides)
    assert not evaluator.applies(RequestView(), pair)


def test_a_failed_side_fails_parity_and_says_which():
    result = compare(side("baseline"), side("candidate", status="timeout"))
    assert not result.passed and result.details["failed_cohort"] == "candidate"


def test_first_difference_on_words_and_text():
    assert first_difference("abc", "abd") == 2
    assert first_difference(["a", "b"], ["a", "b"]) is None
    assert first_difference(["a"], ["a", "b"]) == 1


def calls(*pairs):
    return {
        "tool_calls": [
            {"type": "function", "function": {"name": name, "arguments": arguments}}
            for name, arguments in pairs
        ]
    }


def test_tool_calls_with_other_arguments_are_no_match():
    oslo = side("baseline", "", output_extra=calls(("get_weather", '{"city": "Oslo"}')))
    bergen = side("candidate", "", output_extra=calls(("get_weather", '{"city": "Bergen"}')))
    result = compare(oslo, bergen)
    assert not result.passed and not result.details["exact_match"]
    assert result.details["first_diff_tool_call"] == 0 and result.score == 0.0


def test_tool_calls_match_on_canonical_json_and_differ_on_names():
    spaced = calls(("get_weather", '{"city": "Oslo", "unit": "C"}'))
    packed = calls(("get_weather", '{"unit":"C","city":"Oslo"}'))
    same = compare(
        side("baseline", "", output_extra=spaced), side("candidate", "", output_extra=packed)
    )
    assert same.passed and same.details["tool_calls"] == [1, 1]
    other = calls(("get_time", '{"city": "Oslo", "unit": "C"}'))
    renamed = compare(
        side("baseline", "", output_extra=spaced), side("candidate", "", output_extra=other)
    )
    assert not renamed.passed


def test_a_missing_tool_call_is_no_match():
    two = calls(("search", {"q": "fjords"}), ("search", {"q": "glaciers"}))
    one = calls(("search", {"q": "fjords"}))
    result = compare(
        side("baseline", "", output_extra=two), side("candidate", "", output_extra=one)
    )
    assert not result.passed and result.details["first_diff_tool_call"] == 1
    assert result.score == pytest.approx(0.5)
