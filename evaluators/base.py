"""The evaluator interface: frozen views of DB rows in, a typed `EvalResult` out.

Evaluators never see ORM objects. The service builds a `GenerationView` per side and one
`RequestView` per pair from the rows, so evaluators stay pure functions of their inputs
and can run in any process (Celery worker, benchmark, test).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from gate.db.enums import GenerationStatus, Outcome


class NotEvaluable(StrEnum):
    """Why an evaluator could not judge: neither a pass nor a fail."""

    TRUNCATED = "truncated"
    MISSING_INPUT = "missing_input"
    NO_SANDBOX = "no_sandbox"


@dataclass(frozen=True)
class EvalResult:
    """One evaluator's verdict on one generation (or on a pair, for pair evaluators).

    `passed` is None exactly when `not_evaluable` names why the evaluator could not judge.
    """

    score: float | None
    passed: bool | None
    details: dict[str, Any] = field(default_factory=dict)
    not_evaluable: NotEvaluable | None = None

    @classmethod
    def unevaluable(cls, reason: NotEvaluable, **details: Any) -> EvalResult:
        """Return the result of an evaluator that could not judge, with its reason."""
        return cls(score=None, passed=None, details=details, not_evaluable=reason)


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model made: the tool's name and its raw arguments."""

    name: str
    arguments: Any


@dataclass(frozen=True)
class GenerationView:
    """What evaluators may read of one route call."""

    cohort: str
    status: str = "ok"
    output: str = ""
    output_extra: Mapping[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    temperature: float | None = None
    output_tokens: int | None = None
    error: str | None = None
    generation_id: int | None = None
    # The output was cut at the evaluation-input limit: nothing can judge half an answer.
    truncated: bool = False

    @property
    def outcome(self) -> Outcome:
        """Return what this side's status means (the one definition in `gate.db.enums`)."""
        return GenerationStatus(self.status).outcome

    @property
    def failed(self) -> bool:
        """Return whether the route gave no usable answer: it fails every evaluator, so
        quality is never compared on the survivors only."""
        return self.outcome is Outcome.ROUTE_FAILURE

    @property
    def attributable(self) -> bool:
        """Return whether the route is answerable for this side (not dropped, not cancelled)."""
        return self.outcome is not Outcome.NOT_ATTRIBUTABLE

    @property
    def tool_calls(self) -> list[ToolCall]:
        """Return the tool calls in `output_extra`, in OpenAI or flat shape."""
        raw = self.output_extra.get("tool_calls") or []
        calls = []
        for item in raw if isinstance(raw, list) else []:
            if not isinstance(item, Mapping):
                continue
            function = item.get("function", item)
            if isinstance(function, Mapping):
                calls.append(ToolCall(str(function.get("name", "")), function.get("arguments")))
        return calls


@dataclass(frozen=True)
class RequestView:
    """What evaluators may read of the request both sides answered."""

    body: Mapping[str, Any] = field(default_factory=dict)
    inputs: Mapping[str, Any] = field(default_factory=dict)
    # Parts cut at the evaluation-input limit ("body", "inputs"): a cut body may have lost
    # what decides whether an evaluator applies (`response_format`, tools).
    truncated: frozenset[str] = frozenset()

    @property
    def messages(self) -> list[Mapping[str, Any]]:
        """Return the chat messages of the request (empty for text completions)."""
        raw = self.body.get("messages") or []
        return [m for m in raw if isinstance(m, Mapping)] if isinstance(raw, list) else []

    @property
    def temperature(self) -> float | None:
        """Return the sampling temperature the client asked for, if it said."""
        value = self.body.get("temperature")
        return float(value) if isinstance(value, int | float) else None


class Evaluator(Protocol):
    """Scores one generation against the request it answered.

    `applies` looks at the request only, so both sides of a pair get the same set of
    evaluators whatever they answered.
    """

    name: str
    version: str

    def applies(self, request: RequestView) -> bool:
        """Return whether the request declared what this evaluator needs."""
        ...

    def evaluate(self, generation: GenerationView, request: RequestView) -> EvalResult:
        """Return the score of a generation whose status is usable.

        Args:
            generation: the side to score; the caller has checked it did not fail.
            request: the request both sides answered.

        Returns:
            The score in [0, 1] (or None), whether it passed, and explanatory details.
        """
        ...


class PairEvaluator(Protocol):
    """Compares the two sides of a pair; the result is stored on the non-baseline side."""

    name: str
    version: str

    def applies(self, request: RequestView, sides: Sequence[GenerationView]) -> bool:
        """Return whether this pair is one the check is defined for."""
        ...

    def compare(self, baseline: GenerationView, other: GenerationView) -> EvalResult:
        """Return how far `other` departs from `baseline`; both sides are usable."""
        ...


def failed_side(generation: GenerationView) -> EvalResult:
    """Return the failing result every evaluator gives a side that produced no answer."""
    return EvalResult(
        score=0.0,
        passed=False,
        details={"reason": f"generation_{generation.status}", "error": generation.error},
    )


def run_evaluator(
    evaluator: Evaluator, generation: GenerationView, request: RequestView
) -> EvalResult | None:
    """Run one evaluator on one side, failing it outright when the route failed; a side
    that is not attributable to its route gets no result at all (None)."""
    if not generation.attributable:
        return None
    if generation.failed:
        return failed_side(generation)
    if generation.truncated or request.truncated:
        return cut_input(request, generation)
    return evaluator.evaluate(generation, request)


def cut_input(request: RequestView, *sides: GenerationView) -> EvalResult:
    """Return "not evaluable (truncated)", naming what was cut."""
    cut = sorted(request.truncated) + [f"{s.cohort}_output" for s in sides if s.truncated]
    return EvalResult.unevaluable(NotEvaluable.TRUNCATED, cut=cut)


def run_pair_evaluator(
    evaluator: PairEvaluator, baseline: GenerationView, other: GenerationView
) -> EvalResult | None:
    """Run one pair evaluator, failing it outright when either side's route failed; None
    (no result) when either side is not attributable to its route."""
    if not (baseline.attributable and other.attributable):
        return None
    for side in (other, baseline):
        if side.failed:
            result = failed_side(side)
            return EvalResult(0.0, False, {**result.details, "failed_cohort": side.cohort})
    if baseline.truncated or other.truncated:
        return cut_input(RequestView(), baseline, other)
    return evaluator.compare(baseline, other)
