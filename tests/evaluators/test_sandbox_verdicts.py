"""What the task evaluator makes of a box: forged results, bad limits, a broken bwrap, memory.

Every run goes through the real evaluator and the real bubblewrap sandbox.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from evaluators.base import EvalResult, GenerationView, NotEvaluable, RequestView
from evaluators.registry import build_evaluators
from evaluators.sandbox import Limits, SandboxConfig, configure, sandbox_probe
from evaluators.task import NOT_RUN, TaskEvaluator
from gate.errors import ConfigError

FAILING = ["assert False, 'never passes'", "assert 1 == 2"]
# The reviewer's forgery: find the harness's job through the frames, print a results
# line under its nonce claiming COUNT passed tests, and leave before any test runs.
FORGE = """
import sys, os, json
f = sys._getframe()
while f is not None and "job" not in f.f_locals:
    f = f.f_back
job = f.f_locals["job"]
fake = {"solution_error": None, "passed": True, "error": None,
        "tests": [{"name": "x%d" % i, "passed": True, "error": None} for i in range(COUNT)]}
line = job["nonce"] + " " + json.dumps(fake) + "\\n"
os.write(1, (line * LINES).encode())
os._exit(0)
"""
ADD = "```python\ndef add(a, b):\n    return a + b\n```"


@pytest.fixture(autouse=True)
def real_sandbox() -> None:
    configure(SandboxConfig())
    assert sandbox_probe().jail is not None, sandbox_probe().detail


def evaluate(
    code: str, cases: list[str], limits: Limits | None = None, **settings: object
) -> EvalResult:
    answer = f"```python\n{textwrap.dedent(code)}\n```"
    request = RequestView(inputs={"tests": {"cases": cases, **settings}})
    evaluator = TaskEvaluator(limits or Limits(timeout_s=10))
    return evaluator.evaluate(GenerationView("candidate", output=answer), request)


@pytest.mark.parametrize("count", [2, 50])
def test_an_answer_cannot_forge_passes_or_inflate_the_count(count: int) -> None:
    result = evaluate(FORGE.replace("COUNT", str(count)).replace("LINES", "2"), FAILING)
    execution = result.details["execution"]
    assert not result.passed and result.score == 0.0, execution
    assert execution["status"] == "crashed" and execution["passed_tests"] == 0
    assert [t["name"] for t in execution["tests"]] == ["test_0", "test_1"]


def test_claims_count_for_the_box_they_came_from_only() -> None:
    # One well-formed line per box: the most an answer can claim is each test once,
    # and nothing it adds (names, lists of tests) reaches what is stored.
    result = evaluate(FORGE.replace("COUNT", "50").replace("LINES", "1"), FAILING)
    execution = result.details["execution"]
    assert result.score is not None and result.score <= 1.0
    assert execution["passed_tests"] <= 2 and len(execution["tests"]) == 2
    assert all(set(t) == {"name", "passed", "error"} for t in execution["tests"])
    assert "x49" not in str(result.details)


def test_a_test_never_sees_the_other_tests() -> None:
    peek = """
import sys
SEEN, f = "", sys._getframe()
while f is not None:
    SEEN, f = SEEN + repr(f.f_locals), f.f_back
"""
    # Each test carries a marker the other looks for in everything the answer can reach.
    cases = [
        "assert 'marker' + '-b' not in SEEN, 'saw test b'  # marker-a",
        "assert 'marker' + '-a' not in SEEN, 'saw test a'  # marker-b",
    ]
    result = evaluate(peek, cases)
    assert result.passed, result.details["execution"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("memory_mb", -1),
        ("memory_mb", 0),
        ("timeout_s", -5),
        ("timeout_s", "nan"),
        ("timeout_s", math.inf),
        ("memory_mb", True),
    ],
)
def test_a_request_cannot_lift_the_limits(name: str, value: object) -> None:
    hog = "hog = bytearray(1500 * 1024 * 1024)"
    result = evaluate(hog, ["assert True"], Limits(timeout_s=10, memory_mb=512), **{name: value})
    assert result.not_evaluable is NotEvaluable.MISSING_INPUT, result
    assert name in result.details["error"] and "execution" not in result.details


def test_a_policy_cannot_lift_the_limits() -> None:
    with pytest.raises(ConfigError, match="memory_mb must be finite and at least 1"):
        build_evaluators({"evaluators": {"task": {"memory_mb": -1}}})
    with pytest.raises(ConfigError, match="max_processes"):
        build_evaluators({"evaluators": {"task": {"max_processes": 0}}})


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the sandbox uid (a root worker drops to it) can read."""
    with tempfile.TemporaryDirectory(prefix="specgate-test-") as name:
        os.chmod(name, 0o755)
        yield Path(name)


def test_a_sandbox_that_breaks_after_the_probe_is_not_the_answers_failure(
    shared_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = shared_dir / "broken"
    wrapper = shared_dir / "bwrap"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ -e "{broken}" ]; then\n'
        '  echo "bwrap: No permissions to create new namespace" >&2; exit 1\n'
        "fi\n"
        'exec bwrap "$@"\n'
    )
    wrapper.chmod(0o755)
    configure(SandboxConfig(bwrap=str(wrapper)))
    assert sandbox_probe().jail is not None, sandbox_probe().detail
    broken.touch()  # the namespace limit is reached, the binary replaced...
    before = NOT_RUN._value.get()
    with caplog.at_level(logging.ERROR, logger="specgate.sandbox"):
        result = evaluate(ADD.strip("`").removeprefix("python\n"), ["assert add(1, 2) == 3"])
    assert result.not_evaluable is NotEvaluable.NO_SANDBOX and result.passed is None, result
    assert "No permissions to create new namespace" in result.details["sandbox"]
    assert NOT_RUN._value.get() == before + 1
    assert "sandbox_failed" in caplog.text
    # The cached probe was dropped: the next look finds the sandbox gone.
    assert sandbox_probe().jail is None


HOLD = """
import os
release_r, _release_w = os.pipe()
HELD = 0
for _ in range(16):
    ready_r, ready_w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            block = bytearray(100 << 20)
            os.write(ready_w, b"1")
        except MemoryError:
            os.write(ready_w, b"0")
        os.read(release_r, 1)
        os._exit(0)
    if os.read(ready_r, 1) != b"1":
        break
    HELD += 1
"""


def test_a_box_holds_at_most_its_memory_total() -> None:
    configure(SandboxConfig(memory_total_mb=512))
    limits = Limits(timeout_s=20, memory_mb=128, max_processes=16)
    # Each held child and the harness may each use up to memory_mb of address space.
    result = evaluate(HOLD, ["assert (HELD + 1) * 128 <= 512, HELD"], limits)
    assert result.passed, result.details["execution"]


def test_the_default_box_is_bounded_to_two_gib() -> None:
    read = """
import resource
AS = resource.getrlimit(resource.RLIMIT_AS)[0]
NPROC = resource.getrlimit(resource.RLIMIT_NPROC)[0]
"""
    result = evaluate(read, ["assert AS * NPROC <= 2 << 30, (AS, NPROC)"], Limits())
    assert result.passed, result.details["execution"]
