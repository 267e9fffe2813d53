"""Task completion: the request's declared reference checks and code tests.

`inputs.tests` runs the code in the answer against Python tests in the sandbox. It is a
string (one test), a list of strings or `{"name", "code"}` mappings, or a mapping with
`cases` and optional `language`, `timeout_s`, `memory_mb` (finite numbers, at least 1:
anything else makes the evaluation not evaluable, never a run with weaker limits).
Without a working sandbox, or when the box fails to start, the evaluation is not
evaluable (no sandbox) and no code runs; the policy option
`sandbox: unsafe-local` runs it with weaker isolation instead, and says so in the details.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any

from prometheus_client import Counter

from evaluators.base import EvalResult, GenerationView, NotEvaluable, RequestView
from evaluators.checks import declared_checks, run_check
from evaluators.sandbox import CodeTest, Limits, SandboxMode, run_python, sandbox_probe

_CODE_BLOCK = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_PYTHON_TAGS = frozenset({"", "python", "python3", "py"})
NOT_RUN = Counter(
    "specgate_sandbox_unavailable_total",
    "Code-tested evaluations recorded not evaluable: no working sandbox, or a box failed to start.",
)


def extract_code(answer: str) -> str:
    """Return the answer's Python: its code blocks that compile, else the whole answer."""
    blocks = [body for tag, body in _CODE_BLOCK.findall(answer) if tag.lower() in _PYTHON_TAGS]
    # Models add blocks of example output or doctest sessions: keep only real code.
    usable = [block for block in blocks if _compiles(block)]
    if usable:
        return "\n\n".join(usable)
    return answer if not blocks and _compiles(answer) else ""


def _compiles(code: str) -> bool:
    try:
        compile(code, "answer", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def declared_tests(inputs: Mapping[str, Any]) -> tuple[list[CodeTest], Mapping[str, Any]]:
    """Return the request's code tests and their settings (language and limits)."""
    raw = inputs.get("tests")
    settings: Mapping[str, Any] = {}
    if isinstance(raw, Mapping):
        settings, raw = raw, raw.get("cases")
    if isinstance(raw, str):
        raw = [raw]
    cases = []
    for index, item in enumerate(raw if isinstance(raw, list) else []):
        if isinstance(item, str):
            cases.append(CodeTest(f"test_{index}", item))
        elif isinstance(item, Mapping) and isinstance(item.get("code"), str):
            cases.append(CodeTest(str(item.get("name", f"test_{index}")), item["code"]))
    return cases, settings


class TaskEvaluator:
    """Scores the share of declared checks and tests the answer passes."""

    name = "task"
    version = "1"

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        run_code: bool = True,
        sandbox: SandboxMode = SandboxMode.BWRAP,
    ) -> None:
        self.limits = limits or Limits()
        self.run_code = run_code
        self.sandbox = sandbox

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> TaskEvaluator:
        """Build from policy options: `run_code`, `sandbox` and the `Limits` fields."""
        limits = {k: v for k, v in options.items() if k not in ("run_code", "sandbox")}
        try:
            mode = SandboxMode(options.get("sandbox", SandboxMode.BWRAP))
        except ValueError:
            known = ", ".join(m.value for m in SandboxMode)
            raise TypeError(f"sandbox must be one of {known}") from None
        try:
            bounds = Limits(**limits)
        except ValueError as exc:
            raise TypeError(str(exc)) from None
        return cls(bounds, run_code=bool(options.get("run_code", True)), sandbox=mode)

    def applies(self, request: RequestView) -> bool:
        """Apply when the request declared a reference, checks or tests."""
        inputs = request.inputs
        return bool(declared_checks(inputs)) or (self.run_code and bool(inputs.get("tests")))

    def evaluate(self, generation: GenerationView, request: RequestView) -> EvalResult:
        """Run the checks on the answer text and the tests on its code."""
        checks = declared_checks(request.inputs)
        outcomes = [asdict(run_check(generation.output, check)) for check in checks]
        details: dict[str, Any] = {"checks": outcomes}
        total, passed = len(outcomes), sum(o["passed"] for o in outcomes)
        cases, settings = declared_tests(request.inputs)
        if self.run_code and request.inputs.get("tests"):
            found = sandbox_probe() if self.sandbox is SandboxMode.BWRAP else None
            if found is not None and found.jail is None:
                return _no_sandbox(details, found.detail)
            try:
                limits = self._limits(settings)
            except ValueError as exc:
                error = f"tests: {exc}"
                return EvalResult.unevaluable(NotEvaluable.MISSING_INPUT, **details, error=error)
            execution = self._execute(generation.output, cases, settings, limits)
            if execution["status"] == "unavailable":
                return _no_sandbox(details, execution["solution_error"])
            details["execution"] = execution
            total += max(len(cases), 1)
            passed += execution["passed_tests"]
        score = passed / total if total else None
        return EvalResult(score=score, passed=bool(total) and passed == total, details=details)

    def _limits(self, settings: Mapping[str, Any]) -> Limits:
        timeout_s = _bound(settings, "timeout_s", self.limits.timeout_s)
        memory_mb = _bound(settings, "memory_mb", self.limits.memory_mb)
        return replace(
            self.limits, timeout_s=min(timeout_s, 60.0), memory_mb=int(min(memory_mb, 4096))
        )

    def _execute(
        self, answer: str, cases: list[CodeTest], settings: Mapping[str, Any], limits: Limits
    ) -> dict[str, Any]:
        language = str(settings.get("language", "python")).lower()
        if language not in {"python", "python3", "py"}:
            return {"status": "unsupported_language", "language": language, "passed_tests": 0}
        if not cases:
            return {"status": "no_tests", "passed_tests": 0}
        code = extract_code(answer)
        if not code:
            return {"status": "no_code", "passed_tests": 0}
        result = run_python(code, cases, limits, self.sandbox)
        return {
            "status": result.status,
            "passed_tests": result.passed_count,
            "tests": result.tests,
            "solution_error": result.solution_error,
            "stderr_tail": result.stderr_tail[-500:],
            "duration_s": result.duration_s,
            "isolation": result.isolation,
        }


def _bound(settings: Mapping[str, Any], name: str, default: float) -> float:
    # Negative, infinite or NaN limits would lift the rlimits they set: refuse them.
    value = settings.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, not {value!r}")
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"{name} must be finite and at least 1, not {value!r}")
    return float(value)


def _no_sandbox(details: dict[str, Any], detail: str | None) -> EvalResult:
    NOT_RUN.inc()
    return EvalResult.unevaluable(NotEvaluable.NO_SANDBOX, **details, sandbox=detail)
