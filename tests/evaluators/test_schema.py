"""Schema: JSON mode, JSON schema, tool calls and truncation, each with its failure code."""

from __future__ import annotations

import json

import pytest

from evaluators.base import GenerationView, RequestView
from evaluators.schema import SchemaEvaluator

INVOICE_SCHEMA = {
    "type": "object",
    "properties": {
        "invoice_id": {"type": "string", "pattern": "^INV-[0-9]{4}$"},
        "total": {"type": "number", "minimum": 0},
        "currency": {"enum": ["EUR", "USD"]},
        "lines": {"type": "array", "items": {"type": "object", "required": ["sku", "qty"]}},
    },
    "required": ["invoice_id", "total", "currency"],
    "additionalProperties": False,
}
JSON_SCHEMA_REQUEST = RequestView(
    body={
        "messages": [{"role": "user", "content": "Extract the invoice as JSON."}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "invoice", "schema": INVOICE_SCHEMA, "strict": True},
        },
    }
)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TOOLS_REQUEST = RequestView(
    body={"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": [WEATHER_TOOL]}
)
GOOD_INVOICE = {"invoice_id": "INV-0042", "total": 118.5, "currency": "EUR", "lines": []}


def output(text: str, finish_reason: str = "stop", **extra) -> GenerationView:
    return GenerationView(cohort="candidate", output=text, finish_reason=finish_reason, **extra)


def tool_call(name: str, arguments: str, finish_reason: str = "tool_calls") -> GenerationView:
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return GenerationView(
        cohort="candidate", finish_reason=finish_reason, output_extra={"tool_calls": [call]}
    )


def evaluate(generation, request):
    return SchemaEvaluator().evaluate(generation, request)


def test_json_matching_its_schema_passes():
    result = evaluate(output(json.dumps(GOOD_INVOICE)), JSON_SCHEMA_REQUEST)
    assert result.passed and result.score == 1.0 and result.details["code"] is None


def test_json_that_parses_but_violates_its_schema_fails_with_the_path():
    bad = {**GOOD_INVOICE, "total": "118.50", "currency": "GBP"}
    result = evaluate(output(json.dumps(bad)), JSON_SCHEMA_REQUEST)
    assert not result.passed and result.details["code"] == "schema_violation"
    paths = {e["path"] for e in result.details["failures"][0]["errors"]}
    assert paths == {"/total", "/currency"}


def test_a_missing_required_field_is_a_schema_violation():
    bad = {k: v for k, v in GOOD_INVOICE.items() if k != "invoice_id"}
    result = evaluate(output(json.dumps(bad)), JSON_SCHEMA_REQUEST)
    assert result.details["code"] == "schema_violation"
    assert "'invoice_id' is a required property" in result.details["failures"][0]["message"]


def test_prose_where_json_was_asked_is_invalid_json():
    result = evaluate(output("The invoice INV-0042 totals 118.50 EUR."), JSON_SCHEMA_REQUEST)
    assert not result.passed and result.details["code"] == "invalid_json"


def test_json_cut_off_by_the_token_limit_is_truncated_not_invalid():
    cut = json.dumps(GOOD_INVOICE)[:30]
    result = evaluate(output(cut, finish_reason="length"), JSON_SCHEMA_REQUEST)
    assert not result.passed and result.details["code"] == "truncated"
    stopped = evaluate(output(cut, finish_reason="stop"), JSON_SCHEMA_REQUEST)
    assert stopped.details["code"] == "invalid_json"


def test_json_mode_without_a_schema_accepts_any_json():
    request = RequestView(body={"response_format": {"type": "json_object"}})
    assert evaluate(output('{"anything": [1, 2]}'), request).passed
    assert evaluate(output("{'single': 'quotes'}"), request).details["code"] == "invalid_json"


def test_a_code_fence_fails_unless_the_policy_allows_it():
    fenced = "```json\n" + json.dumps(GOOD_INVOICE) + "\n```"
    assert evaluate(output(fenced), JSON_SCHEMA_REQUEST).details["code"] == "invalid_json"
    lenient = SchemaEvaluator.from_options({"allow_code_fence": True})
    assert lenient.evaluate(output(fenced), JSON_SCHEMA_REQUEST).passed


def test_a_schema_declared_in_the_inputs_is_enforced():
    request = RequestView(inputs={"schema": INVOICE_SCHEMA})
    assert SchemaEvaluator().applies(request)
    assert not evaluate(output('{"invoice_id": "42"}'), request).passed


def test_a_broken_declared_schema_is_reported_as_such():
    request = RequestView(inputs={"schema": {"type": "no-such-type"}})
    result = evaluate(output("{}"), request)
    assert result.details["code"] == "invalid_declared_schema"


def test_a_valid_tool_call_passes():
    result = evaluate(
        tool_call("get_weather", '{"city": "Oslo", "unit": "celsius"}'), TOOLS_REQUEST
    )
    assert result.passed and result.details["checks"] == 1


def test_a_tool_call_with_bad_arguments_fails_validation():
    result = evaluate(tool_call("get_weather", '{"city": 59.9, "unit": "kelvin"}'), TOOLS_REQUEST)
    assert not result.passed
    assert result.details["code"] == "tool_arguments_schema_violation"
    assert result.details["failures"][0]["target"] == "tool_calls[0]"
    assert {e["path"] for e in result.details["failures"][0]["errors"]} == {"/city", "/unit"}


def test_a_call_to_a_tool_that_was_not_defined_fails():
    result = evaluate(tool_call("get_forecast", '{"city": "Oslo"}'), TOOLS_REQUEST)
    assert result.details["code"] == "unknown_tool"


def test_arguments_that_are_not_json_fail_and_truncated_ones_say_so():
    broken = evaluate(tool_call("get_weather", "city=Oslo"), TOOLS_REQUEST)
    assert broken.details["code"] == "invalid_tool_arguments"
    cut = evaluate(tool_call("get_weather", '{"city": "Os', "length"), TOOLS_REQUEST)
    assert cut.details["code"] == "truncated"


def test_a_required_tool_call_that_never_came_fails():
    request = RequestView(body={**TOOLS_REQUEST.body, "tool_choice": "required"})
    result = evaluate(output("It is sunny in Oslo."), request)
    assert result.details["code"] == "missing_tool_call"
    assert evaluate(output("It is sunny in Oslo."), TOOLS_REQUEST).passed


def test_tool_calls_are_refused_when_tool_choice_is_none():
    request = RequestView(body={**TOOLS_REQUEST.body, "tool_choice": "none"})
    result = evaluate(tool_call("get_weather", '{"city": "Oslo"}'), request)
    assert result.details["code"] == "unexpected_tool_call"


def test_a_turn_that_calls_a_tool_owes_no_json_body():
    request = RequestView(body={**TOOLS_REQUEST.body, "response_format": {"type": "json_object"}})
    assert evaluate(tool_call("get_weather", '{"city": "Oslo"}'), request).passed


def test_score_is_the_share_of_checks_passed():
    calls = [
        {"function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
        {"function": {"name": "get_weather", "arguments": '{"unit": "celsius"}'}},
    ]
    generation = GenerationView(cohort="candidate", output_extra={"tool_calls": calls})
    result = evaluate(generation, TOOLS_REQUEST)
    assert result.score == pytest.approx(0.5) and not result.passed


def test_it_applies_only_to_requests_that_asked_for_structure():
    chat = RequestView(body={"messages": [{"role": "user", "content": "hi"}]})
    assert not SchemaEvaluator().applies(chat)
    assert SchemaEvaluator().applies(TOOLS_REQUEST) and SchemaEvaluator().applies(
        JSON_SCHEMA_REQUEST
    )
