"""Task completion: declared reference checks, and code run against tests in a sandbox."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from evaluators.base import GenerationView, RequestView
from evaluators.checks import declared_checks, last_number, run_check
from evaluators.sandbox import CodeTest, Limits, namespace_prefix, run_python
from evaluators.task import TaskEvaluator, extract_code

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


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on loopback: reaching it proves the child had a network."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


def connect_code(port: int) -> str:
    return f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).close()"


def test_without_any_isolation_the_probe_does_reach_the_network(listener):
    # The control: shows the probe below detects network access when there is some.
    result = run_python(connect_code(listener), [], Limits(namespace=False, audit_hook=False))
    assert result.status == "passed", result.solution_error


def test_the_audit_hook_alone_refuses_sockets(listener):
    result = run_python(connect_code(listener), [], Limits(namespace=False, audit_hook=True))
    assert result.status == "failed" and "PermissionError" in result.solution_error


@pytest.mark.skipif(namespace_prefix() is None, reason="no network namespace on this host")
def test_the_network_namespace_alone_has_no_route_out(listener):
    result = run_python(connect_code(listener), [], Limits(namespace=True, audit_hook=False))
    assert result.status == "failed" and "OSError" in result.solution_error
    assert result.isolation == ("namespace",)


def test_code_that_tries_the_network_fails_its_tests_by_default(listener):
    sneaky = (
        "```python\nimport urllib.request\n"
        "def median(values):\n"
        f"    urllib.request.urlopen('http://127.0.0.1:{listener}/', timeout=2)\n"
        "    return sorted(values)[len(values) // 2]\n```"
    )
    result = TaskEvaluator(FAST).evaluate(answer(sneaky), code_request(tests=TESTS[:1]))
    execution = result.details["execution"]
    assert not result.passed and execution["tests"][0]["passed"] is False
    assert "audit_hook" in execution["isolation"]


def test_starting_programs_is_refused_by_the_audit_hook():
    code = "import subprocess\nsubprocess.run(['true'])"
    result = run_python(code, [], Limits(namespace=False))
    assert result.status == "failed" and "subprocess.Popen" in result.solution_error
