"""Evaluator inputs a client declares, in the `specgate` body field or in headers.

They are stored with the request and stripped before any upstream call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gate.errors import BadRequest
from gate.request.fields import BODY_FIELD

KNOWN = frozenset({"context", "reference", "checks", "tests", "tenant", "schema", "segment"})
# Code-test limits a request may set: a bad one would run tests under weaker rlimits.
TEST_LIMITS = ("timeout_s", "memory_mb")
HEADERS = {
    "x-specgate-tenant": "tenant",
    "x-specgate-reference": "reference",
    "x-specgate-context": "context",
}


@dataclass(frozen=True)
class Declared:
    """The upstream body (without specgate fields) and the declared evaluator inputs."""

    upstream_body: dict[str, Any]
    inputs: dict[str, Any] = field(default_factory=dict)


def split_inputs(body: dict[str, Any], headers: Mapping[str, str]) -> Declared:
    """Separate declared evaluator inputs from the body that goes upstream."""
    declared = body.get(BODY_FIELD)
    if declared is None:
        upstream = body
        inputs: dict[str, Any] = {}
    else:
        if not isinstance(declared, dict):
            raise BadRequest(f"'{BODY_FIELD}' must be an object of evaluator inputs")
        unknown = set(declared) - KNOWN
        if unknown:
            allowed = ", ".join(sorted(KNOWN))
            raise BadRequest(f"unknown '{BODY_FIELD}' fields {sorted(unknown)}; allowed: {allowed}")
        _check_test_limits(declared.get("tests"))
        upstream = {key: value for key, value in body.items() if key != BODY_FIELD}
        inputs = dict(declared)
    for header, name in HEADERS.items():
        value = headers.get(header)
        if value and name not in inputs:
            inputs[name] = _header_value(name, value)
    return Declared(upstream, inputs)


def _check_test_limits(tests: Any) -> None:
    if not isinstance(tests, dict):
        return
    for name in TEST_LIMITS:
        value = tests.get(name, 1)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 1:
            raise BadRequest(f"'{BODY_FIELD}.tests.{name}' must be a finite number of at least 1")


def _header_value(name: str, value: str) -> Any:
    if name == "context" and value.startswith(("[", "{")):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            raise BadRequest("X-Specgate-Context is not valid JSON") from None
    return value
