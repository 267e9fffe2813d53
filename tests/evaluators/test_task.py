"""Task completion: declared reference checks, and code run against tests in a sandbox."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from evaluators.base import GenerationView, RequestView
from evaluators.checks import declared_checks, last_number, run_check
from evaluators.registry import build_evaluators
from evaluators.sandbox import (
    CodeTest,
    Limits,
    SandboxConfig,
    SandboxMode,
    configure,
    run_python,
)
from evaluators.secrets import REDACTED, configured_secrets, scrub
from evaluators.task import TaskEvaluator, extract_code
from gate.errors import ConfigError
from gate.settings import Settings

FAST = Limits(timeout_s=5)
TESTS = [
    "assert median([3, 1, 2]) == 2",
    {"name": "even", "code": "assert median([4, 1, 3, 2]) == 2.5"},
    {
        "name": "empty",
        "code": "try:\n    median([])\nexcept ValueError:\n    pass\nelse:\n    raise Exception",
    },
]
GOOD_ANSWER = """Here is a median function:

```python
def median(values):
    if not values:
        raise ValueError("median of nothing")
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
```

For example:

```python
>>> median([1, 2, 3])
2
```
"""


def answer(text: str) -> GenerationView:
    return GenerationView(cohort="candidate", output=text)


def code_request(tests=TESTS, **settings) -> RequestView:
    return RequestView(inputs={"tests": {"cases": tests, **settings}})


@pytest.mark.parametrize(
    ("check", "text", "passed"),
    [
        ({"type": "exact", "value": "Paris"}, " Paris\n", True),
        ({"type": "exact", "value": "Paris"}, "paris", False),
        ({"type": "normalised", "value": "The Eiffel Tower"}, "eiffel tower.", True),
        ({"type": "normalised", "value": "Eiffel Tower"}, "The tower", False),
        ({"type": "numeric", "value": 1234.5, "tolerance": 0.01}, "Total: 1,234.50 EUR", True),
        ({"type": "numeric", "value": 100, "rel_tolerance": 0.05}, "about 104 units", True),
        ({"type": "numeric", "value": 100, "rel_tolerance": 0.05}, "about 106 units", False),
        ({"type": "numeric", "value": 42}, "I cannot say.", False),
        ({"type": "regex", "pattern": r"^yes\b", "flags": "i"}, "Yes, it is.", True),
        ({"type": "regex", "pattern": r"\d{4}-\d{2}-\d{2}", "full": True}, "2025-05-14", True),
        ({"type": "regex", "pattern": r"\d{4}-\d{2}-\d{2}", "full": True}, "on 2025-05-14", False),
        ({"type": "contains_all", "values": ["Oslo", "Bergen"]}, "Bergen and Oslo.", True),
        ({"type": "contains_all", "values": ["Oslo", "Bergen"]}, "Oslo only", False),
    ],
)
def test_reference_checks_pass_and_fail_for_the_right_reason(check, text, passed):
    assert run_check(text, check).passed is passed


def test_a_bare_reference_is_a_normalised_check_and_checks_inherit_it():
    assert declared_checks({"reference": "42"}) == [{"type": "normalised", "value": "42"}]
    checks = declared_checks({"reference": "42", "checks": [{"type": "numeric"}]})
    assert checks == [{"value": "42", "type": "numeric"}]


def test_a_malformed_or_unknown_check_fails_instead_of_raising():
    assert "unknown check type" in run_check("x", {"type": "fuzzy"}).detail
    assert "malformed" in run_check("x", {"type": "regex", "pattern": "("}).detail


def test_the_final_number_is_the_answer():
    assert last_number("Step 1: 3 + 4 = 7. Step 2: 7 * 6 = -42.5") == -42.5


def test_checks_score_the_share_passed():
    request = RequestView(
        inputs={
            "checks": [
                {"type": "numeric", "value": 12},
                {"type": "contains_all", "values": ["apples"]},
            ]
        }
    )
    result = TaskEvaluator().evaluate(answer("She has 12 pears."), request)
    assert result.score == 0.5 and not result.passed


def test_code_is_taken_from_blocks_that_compile():
    code = extract_code(GOOD_ANSWER)
    assert code.startswith("def median") and ">>>" not in code
    assert extract_code("def f():\n    return 1\n") == "def f():\n    return 1\n"
    assert extract_code("I would rather not write code.") == ""


def test_a_correct_solution_passes_every_test():
    result = TaskEvaluator(FAST).evaluate(answer(GOOD_ANSWER), code_request())
    execution = result.details["execution"]
    assert result.passed and result.score == 1.0, execution
    assert execution["status"] == "passed" and execution["passed_tests"] == 3


def test_a_wrong_solution_fails_the_tests_it_gets_wrong():
    wrong = GOOD_ANSWER.replace("(ordered[middle - 1] + ordered[middle]) / 2", "ordered[middle]")
    result = TaskEvaluator(FAST).evaluate(answer(wrong), code_request())
    execution = result.details["execution"]
    assert not result.passed and result.score == pytest.approx(2 / 3)
    assert [t["name"] for t in execution["tests"] if not t["passed"]] == ["even"]


def test_an_endless_loop_times_out():
    looping = "```python\ndef median(values):\n    while True:\n        pass\n```"
    result = TaskEvaluator(FAST).evaluate(answer(looping), code_request(timeout_s=1))
    execution = result.details["execution"]
    assert execution["status"] == "timeout" and not result.passed and result.score == 0.0
    assert execution["duration_s"] < 4


def test_memory_is_limited():
    greedy = "```python\nhog = bytearray(2 * 1024 ** 3)\ndef median(v):\n    return 2\n```"
    result = TaskEvaluator(FAST).evaluate(answer(greedy), code_request(memory_mb=256))
    assert "MemoryError" in result.details["execution"]["solution_error"]


def test_an_answer_without_code_fails_the_tests():
    result = TaskEvaluator(FAST).evaluate(answer("Use statistics.median."), code_request())
    assert result.details["execution"]["status"] == "no_code" and result.score == 0.0


def test_other_languages_are_reported_unsupported():
    result = TaskEvaluator(FAST).evaluate(answer(GOOD_ANSWER), code_request(language="rust"))
    assert result.details["execution"]["status"] == "unsupported_language"


def test_the_child_gets_a_clean_environment_and_an_empty_directory(monkeypatch):
    monkeypatch.setenv("SPECGATE_SECRET_KEY", "do-not-leak")
    probe = "import os\nSEEN = dict(os.environ)\nFILES = os.listdir('.')"
    tests = [
        CodeTest("env", "assert 'SPECGATE_SECRET_KEY' not in SEEN, sorted(SEEN)"),
        CodeTest("cwd", "assert [f for f in FILES if not f.startswith('.')] == [], FILES"),
    ]
    result = run_python(probe, tests, FAST)
    assert result.status == "passed", result.tests
    assert result.isolation == "bwrap"


def test_the_sandbox_is_the_default_and_unsafe_local_only_by_name():
    assert TaskEvaluator.from_options({}).sandbox is SandboxMode.BWRAP
    weak = TaskEvaluator.from_options({"sandbox": "unsafe-local", "timeout_s": 5})
    result = weak.evaluate(answer(GOOD_ANSWER), code_request())
    assert result.passed and result.details["execution"]["isolation"] == "unsafe-local"
    with pytest.raises(ConfigError, match="sandbox must be one of"):
        build_evaluators({"evaluators": {"task": {"sandbox": "none"}}})
    (task,) = [e for e in build_evaluators({"sandbox": "unsafe-local"}).side if e.name == "task"]
    assert task.sandbox is SandboxMode.UNSAFE_LOCAL
    # The old switches that fell back silently are gone.
    with pytest.raises(ConfigError, match="namespace"):
        build_evaluators({"evaluators": {"task": {"namespace": False}}})


def test_unsafe_local_still_refuses_sockets_with_its_audit_hook():
    code = "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=2).close()"
    result = run_python(code, [], FAST, SandboxMode.UNSAFE_LOCAL)
    assert result.status == "failed" and "PermissionError" in result.solution_error


def test_stored_errors_are_bounded_and_scrubbed_of_configured_secrets():
    secret = "sk-live-0123456789abcdef"
    configure(SandboxConfig(secrets=(secret,)))
    try:
        leaky = f"```python\nimport sys\nprint({secret!r} * 400, file=sys.stderr)\n"
        leaky += f"raise RuntimeError({secret!r} * 100)\n```"
        result = TaskEvaluator(FAST).evaluate(answer(leaky), code_request())
    finally:
        configure(SandboxConfig())
    execution = result.details["execution"]
    assert secret not in json.dumps(result.details)
    assert REDACTED in execution["solution_error"] and REDACTED in execution["stderr_tail"]
    assert len(execution["solution_error"]) <= 500 and len(execution["stderr_tail"]) <= 500


def test_configured_secrets_are_the_key_and_the_urls_passwords():
    settings = Settings(
        secret_key="k" * 32,
        database_url="postgresql://app:p%40ss-word@db:5432/specgate",
        redis_url="redis://:redis-pw@cache:6379/0",
    )
    found = configured_secrets(settings)
    assert {"k" * 32, "p@ss-word", "p%40ss-word", "redis-pw"} <= set(found)
    assert scrub("dsn postgresql://app:p%40ss-word@db:5432/specgate", found) == "dsn " + REDACTED


def test_a_worker_process_can_be_made_non_dumpable():
    code = (
        "from evaluators.secrets import dumpable, make_non_dumpable\n"
        "assert dumpable()\nassert make_non_dumpable() and not dumpable()"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
