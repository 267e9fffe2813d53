"""Schema: JSON output where JSON was asked, and tool calls that match the declared tools.

Failure codes (in `details.failures[].code`): `invalid_json`, `schema_violation`,
`truncated` (finish_reason=length inside a structure), `unknown_tool`,
`invalid_tool_arguments`, `tool_arguments_schema_violation`, `missing_tool_call`,
`unexpected_tool_call`, `invalid_declared_schema`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from jsonschema import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from evaluators.base import EvalResult, GenerationView, RequestView, ToolCall

_MAX_ERRORS = 5
_FENCED = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n?```\s*$", re.DOTALL)


@dataclass
class _Report:
    checks: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)

    def fail(self, code: str, message: str, **extra: Any) -> None:
        self.failures.append({"code": code, "message": message[:300], **extra})


def json_requirement(request: RequestView) -> tuple[bool, Mapping[str, Any] | None]:
    """Return whether JSON output was asked and the schema it must satisfy, if any."""
    declared = request.inputs.get("schema")
    if isinstance(declared, Mapping):
        return True, declared
    response_format = request.body.get("response_format")
    if not isinstance(response_format, Mapping):
        return False, None
    kind = response_format.get("type")
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        return True, schema if isinstance(schema, Mapping) else None
    return kind == "json_object", None


def declared_tools(request: RequestView) -> dict[str, Mapping[str, Any] | None]:
    """Return the tools the request defined: name -> parameters schema."""
    tools: dict[str, Mapping[str, Any] | None] = {}
    for item in request.body.get("tools") or []:
        function = item.get("function") if isinstance(item, Mapping) else None
        if isinstance(function, Mapping) and function.get("name"):
            tools[str(function["name"])] = function.get("parameters")
    for function in request.body.get("functions") or []:
        if isinstance(function, Mapping) and function.get("name"):
            tools[str(function["name"])] = function.get("parameters")
    return tools


class SchemaEvaluator:
    """Checks structured output: JSON mode, JSON schema, tool names and arguments."""

    name = "schema"
    version = "1"

    def __init__(self, *, allow_code_fence: bool = False) -> None:
        # Strict by default: a JSON-mode client parses the body as it comes.
        self.allow_code_fence = allow_code_fence

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SchemaEvaluator:
        """Build from policy options."""
        return cls(**options)

    def applies(self, request: RequestView) -> bool:
        """Apply when the request asked for JSON or defined tools."""
        return json_requirement(request)[0] or bool(declared_tools(request))

    def evaluate(self, generation: GenerationView, request: RequestView) -> EvalResult:
        """Check the answer's JSON and tool calls against what the request declared."""
        report = _Report()
        wants_json, schema = json_requirement(request)
        calls = generation.tool_calls
        truncated = generation.finish_reason == "length"
        # A turn that calls tools instead of answering owes no JSON body.
        if wants_json and (generation.output.strip() or not calls):
            self._check_json(generation.output, schema, truncated, report)
        self._check_tools(calls, request, truncated, report)
        passed = not report.failures
        score = 1.0 - len(report.failures) / max(report.checks, 1)
        details = {
            "checks": report.checks,
            "failures": report.failures,
            "code": report.failures[0]["code"] if report.failures else None,
        }
        return EvalResult(score=max(score, 0.0), passed=passed, details=details)

    def _check_json(
        self, text: str, schema: Mapping[str, Any] | None, truncated: bool, report: _Report
    ) -> None:
        report.checks += 1
        fenced = _FENCED.match(text) if self.allow_code_fence else None
        value, error = _parse(fenced.group(1) if fenced else text)
        if error is not None:
            code = "truncated" if truncated else "invalid_json"
            report.fail(code, error, target="output")
        elif schema is not None:
            _validate(value, schema, report, code="schema_violation", target="output")

    def _check_tools(
        self, calls: list[ToolCall], request: RequestView, truncated: bool, report: _Report
    ) -> None:
        tools = declared_tools(request)
        choice = request.body.get("tool_choice")
        if tools and _requires_call(choice) and not calls:
            report.checks += 1
            report.fail("missing_tool_call", f"tool_choice {choice!r} asked for a tool call")
        for index, call in enumerate(calls):
            report.checks += 1
            target = f"tool_calls[{index}]"
            if choice == "none":
                report.fail("unexpected_tool_call", "tool_choice 'none' forbids tool calls")
            elif call.name not in tools:
                report.fail("unknown_tool", f"no tool named {call.name!r}", target=target)
            else:
                self._check_arguments(call, tools[call.name], truncated, target, report)

    def _check_arguments(
        self,
        call: ToolCall,
        parameters: Mapping[str, Any] | None,
        truncated: bool,
        target: str,
        report: _Report,
    ) -> None:
        arguments = call.arguments
        if isinstance(arguments, str):
            arguments, error = _parse(arguments)
            if error is not None:
                code = "truncated" if truncated else "invalid_tool_arguments"
                report.fail(code, error, target=target)
                return
        if not isinstance(arguments, Mapping):
            report.fail("invalid_tool_arguments", "arguments are not an object", target=target)
        elif parameters:
            _validate(
                arguments, parameters, report, code="tool_arguments_schema_violation", target=target
            )


def _requires_call(choice: Any) -> bool:
    return choice == "required" or isinstance(choice, Mapping)


def _parse(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"{exc.msg} at line {exc.lineno} column {exc.colno}"


def _validate(
    value: Any, schema: Mapping[str, Any], report: _Report, *, code: str, target: str
) -> None:
    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
    except SchemaError as exc:
        report.fail("invalid_declared_schema", exc.message, target=target)
        return
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        report.fail(
            code,
            errors[0].message,
            target=target,
            errors=[
                {
                    "path": "/" + "/".join(str(p) for p in e.absolute_path),
                    "message": e.message[:300],
                }
                for e in errors[:_MAX_ERRORS]
            ],
        )


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> Validator:
    """Build (once per distinct schema) a validator of the schema's own draft."""
    schema = json.loads(schema_json)
    cls = validator_for(schema)
    cls.check_schema(schema)
    validator: Validator = cls(schema)
    return validator
