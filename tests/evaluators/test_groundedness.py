"""Groundedness: faithful answers pass, a changed number, name or quote is caught."""

from __future__ import annotations

import pytest

from evaluators.base import GenerationView, RequestView, run_evaluator
from evaluators.groundedness import GroundednessEvaluator, GroundednessOptions, context_sources

CONTEXT = [
    {
        "id": "doc-1",
        "text": (
            "Acme Robotics was founded in 2011 by Maria Okafor in Rotterdam. The company "
            "reported revenue of 48.3 million euros in 2023, up from 41.9 million euros in "
            "2022. It employs 1,250 people across three factories."
        ),
    },
    {
        "id": "doc-2",
        "text": (
            'Its chief executive, Jonas P. Lindqvist, said the new line was "built for '
            'small warehouses" and would ship in March 2025.'
        ),
    },
]
QUESTION = "What are Acme Robotics' recent results?"
REQUEST = RequestView(
    body={"messages": [{"role": "user", "content": QUESTION}], "temperature": 0},
    inputs={"context": CONTEXT},
)
FAITHFUL = (
    "Acme Robotics was founded in 2011 by Maria Okafor in Rotterdam. "
    "Revenue reached 48.3 million euros in 2023, up from 41.9 million euros in 2022. "
    "The company employs 1250 people across 3 factories. "
    'Its chief executive Jonas Lindqvist said the new line was "built for small '
    'warehouses" and would ship in March 2025.'
)


# The same documents asked for a summary: paraphrase is expected, so misses lower the
# calibrated score instead of failing the answer outright.
SUMMARY_REQUEST = RequestView(
    body={"messages": [{"role": "user", "content": "Summarise Acme Robotics' results."}]},
    inputs={"context": CONTEXT},
)


def answer(text: str, **extra) -> GenerationView:
    return GenerationView(cohort="candidate", output=text, **extra)


def test_a_faithful_multi_sentence_summary_passes_with_every_claim_supported():
    result = GroundednessEvaluator().evaluate(answer(FAITHFUL), SUMMARY_REQUEST)
    assert result.passed, result.details["unsupported"]
    assert result.details["task"] == "summary"
    assert result.details["claims"] == 4 and result.details["unsupported"] == []
    assert result.score is not None and result.score > 0.8


def test_one_changed_number_in_an_otherwise_fluent_answer_is_flagged():
    changed = FAITHFUL.replace("48.3 million", "52.3 million")
    result = GroundednessEvaluator().evaluate(answer(changed), REQUEST)
    assert not result.passed
    assert result.details["unsupported"] == [
        "Revenue reached 52.3 million euros in 2023, up from 41.9 million euros in 2022."
    ]
    flagged = [c for c in result.details["per_claim"] if not c["supported"]]
    assert flagged[0]["missing_numbers"] == ["52.3"]
    faithful_score = GroundednessEvaluator().evaluate(answer(FAITHFUL), REQUEST).score
    assert result.score < faithful_score
    assert result.details["task"] == "qa"


def test_a_swapped_name_is_flagged_even_when_every_word_occurs_in_the_context():
    swapped = "Acme Robotics was founded in 2011 by Jonas Okafor in Rotterdam."
    result = GroundednessEvaluator().evaluate(answer(swapped), REQUEST)
    assert not result.passed
    assert result.details["per_claim"][0]["missing_entities"] == ["Jonas Okafor"]


def test_an_invented_place_is_an_unsupported_entity():
    result = GroundednessEvaluator().evaluate(
        answer("Acme Robotics was founded in 2011 by Maria Okafor in Antwerp."), REQUEST
    )
    assert not result.passed
    assert result.details["per_claim"][0]["missing_entities"] == ["Antwerp"]


def test_a_misquotation_is_flagged():
    misquoted = 'Lindqvist said the new line was "built for large factories".'
    result = GroundednessEvaluator().evaluate(answer(misquoted), REQUEST)
    assert not result.passed
    assert result.details["per_claim"][0]["missing_quotes"] == ["built for large factories"]


def test_a_middle_initial_may_be_dropped_from_a_name():
    text = "Jonas Lindqvist is the chief executive."
    result = GroundednessEvaluator().evaluate(answer(text), REQUEST)
    assert result.details["per_claim"][0]["missing_entities"] == []


def test_an_answer_about_something_else_scores_low():
    text = "The Eiffel Tower is 330 metres tall and was completed in 1889 for the World's Fair."
    result = GroundednessEvaluator().evaluate(answer(text), REQUEST)
    assert not result.passed and result.score < 0.2


def test_tool_results_and_the_system_prompt_count_as_context():
    request = RequestView(
        body={
            "messages": [
                {"role": "system", "content": "Today is 14 May 2025. The user is in Lisbon."},
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "tool_calls": [{"function": {"name": "weather"}}]},
                {"role": "tool", "content": '{"city": "Lisbon", "temp_c": 23, "sky": "clear"}'},
            ]
        }
    )
    good = GroundednessEvaluator().evaluate(
        answer("In Lisbon it is 23 C with a clear sky."), request
    )
    bad = GroundednessEvaluator().evaluate(
        answer("In Lisbon it is 27 C with a clear sky."), request
    )
    assert good.passed and not bad.passed


def test_the_users_question_is_not_evidence_unless_configured():
    request = RequestView(
        body={"messages": [{"role": "user", "content": "Is the Orion line made in Porto?"}]},
        inputs={"context": "The Orion line is assembled in Rotterdam."},
    )
    text = "The Orion line is made in Porto."
    assert not GroundednessEvaluator().evaluate(answer(text), request).passed
    lenient = GroundednessEvaluator(GroundednessOptions(include_user=True))
    assert lenient.evaluate(answer(text), request).passed


def test_code_blocks_questions_and_fillers_are_not_claims():
    text = "Sure!\n```python\nprint(revenue_2031)\n```\nWould you like more detail?"
    result = GroundednessEvaluator().evaluate(answer(text), REQUEST)
    assert result.details["claims"] == 0 and result.passed and result.score == 1.0


def test_it_applies_only_where_the_request_carried_context():
    evaluator = GroundednessEvaluator()
    plain = RequestView(body={"messages": [{"role": "system", "content": "Be brief."}]})
    assert evaluator.applies(REQUEST) and not evaluator.applies(plain)
    assert context_sources(REQUEST)[0].startswith("Acme Robotics was founded")


@pytest.mark.parametrize("status", ["error", "timeout", "fallback"])
def test_a_side_that_failed_fails_groundedness_whatever_its_text(status):
    side = answer(FAITHFUL, status=status, error="upstream 503")
    result = run_evaluator(GroundednessEvaluator(), side, REQUEST)
    assert result is not None and not result.passed and result.score == 0.0
    assert result.details["reason"] == f"generation_{status}"


@pytest.mark.parametrize("status", ["dropped", "cancelled"])
def test_a_side_not_attributable_to_its_route_is_not_scored(status):
    side = answer(FAITHFUL, status=status)
    assert run_evaluator(GroundednessEvaluator(), side, REQUEST) is None


def test_a_json_answer_is_checked_on_its_values_not_its_keys():
    grounded = '{"company": "Acme Robotics", "founded": 2011, "revenue_eur_m": 48.3}'
    changed = '{"company": "Acme Robotics", "founded": 2011, "revenue_eur_m": 52.3}'
    assert GroundednessEvaluator().evaluate(answer(grounded), REQUEST).passed
    result = GroundednessEvaluator().evaluate(answer(changed), REQUEST)
    assert not result.passed and result.details["unsupported"] == ["52.3"]
