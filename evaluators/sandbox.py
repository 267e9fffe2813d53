"""Run untrusted Python against tests, boxed by bubblewrap (see `evaluators.jail`).

The solution runs afresh for each test, in a box of its own: the answer never sees
another test, and what one box claims counts for its one test only. Fail closed: without
a working jail, or when a box fails to start, nothing runs and the result says
`unavailable`; the weaker `unsafe-local` mode (a `python -I` child with rlimits and an
audit hook, no namespaces) runs only when a policy names it. Inside the jail the harness
applies rlimits (CPU, address space, file size, open files, processes) before the answer
runs; the worker kills the whole box at the wall-clock deadline. What is kept of a run
(errors, stderr) is size-bounded and scrubbed of the process's configured secrets.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluators.jail import Probe, probe
from evaluators.sandbox_box import Box, BoxResult, run_box
from evaluators.secrets import configured_secrets

if TYPE_CHECKING:
    from gate.settings import Settings

log = logging.getLogger("specgate.sandbox")
HARNESS = Path(__file__).with_name("sandbox_child.py")


class SandboxMode(StrEnum):
    """How code is contained: the real jail, or the weak mode a policy must name."""

    BWRAP = "bwrap"
    UNSAFE_LOCAL = "unsafe-local"


@dataclass(frozen=True)
class Limits:
    """Resource limits for one run."""

    timeout_s: float = 10.0
    memory_mb: int = 512
    max_file_mb: int = 16
    work_mb: int = 64
    max_processes: int = 8

    def __post_init__(self) -> None:
        # A negative or infinite value would lift the rlimit it sets, never tighten it.
        for f in fields(self):
            value = getattr(self, f.name)
            kinds = (int, float) if f.name == "timeout_s" else (int,)
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise ValueError(f"{f.name} must be a number, not {value!r}")
            if not math.isfinite(value) or value < 1:
                raise ValueError(f"{f.name} must be finite and at least 1, not {value!r}")


@dataclass(frozen=True)
class SandboxConfig:
    """This process's sandbox settings: the bwrap binary, the uid, what to scrub, memory."""

    bwrap: str = "bwrap"
    uid: int = 65534
    secrets: tuple[str, ...] = ()
    # What one box's processes may hold together: address space times process count.
    memory_total_mb: int = 2048


class _Config:
    current = SandboxConfig()


def configure(config: SandboxConfig) -> None:
    """Set this process's sandbox settings (worker start-up, from `Settings`)."""
    _Config.current = config


def configure_from(settings: Settings) -> None:
    """Set this process's sandbox from its settings: a Celery worker's, or the process
    that evaluates in place without Redis (`gate.pairs.runner`)."""
    configure(
        SandboxConfig(
            settings.sandbox_bwrap,
            settings.sandbox_uid,
            configured_secrets(settings),
            settings.sandbox_memory_total_mb,
        )
    )


def current_config() -> SandboxConfig:
    """Return this process's sandbox settings."""
    return _Config.current


@dataclass(frozen=True)
class CodeTest:
    """One test: Python statements run after the solution, in a copy of its namespace."""

    name: str
    code: str


@dataclass(frozen=True)
class SandboxResult:
    """What happened: `passed`, `failed`, `timeout`, `crashed` or `unavailable`."""

    status: str
    tests: list[dict[str, Any]] = field(default_factory=list)
    solution_error: str | None = None
    stderr_tail: str = ""
    duration_s: float = 0.0
    isolation: str = ""

    @property
    def passed_count(self) -> int:
        """Return how many tests passed."""
        return sum(1 for t in self.tests if t.get("passed"))


def sandbox_probe(config: SandboxConfig | None = None) -> Probe:
    """Return the (cached) probe for this process's settings: a working jail, or why not."""
    config = config or current_config()
    return probe(config.bwrap, config.uid)


def run_python(
    solution: str,
    tests: Sequence[CodeTest],
    limits: Limits,
    mode: SandboxMode = SandboxMode.BWRAP,
) -> SandboxResult:
    """Run `solution` then each test in a box of its own; never raises for bad code."""
    config = current_config()
    box = _box(config, limits, mode)
    if isinstance(box, str):
        return SandboxResult("unavailable", solution_error=box)
    rlimits = _rlimits(limits, config.memory_total_mb, nproc=mode is SandboxMode.BWRAP)
    base = {"audit": mode is SandboxMode.UNSAFE_LOCAL, "rlimits": rlimits, "solution": solution}
    # One deadline for the whole evaluation, however many tests it declares.
    deadline = time.monotonic() + limits.timeout_s
    outcomes: list[BoxResult] = []
    runs: list[CodeTest | None] = [*tests] or [None]
    for test in runs:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            outcomes.append(BoxResult("timeout", "timeout"))
            continue
        job = {**base, "test": None if test is None else {"name": test.name, "code": test.code}}
        outcome = run_box(box, job, remaining)
        if outcome.status == "unavailable":
            return _sandbox_failed(outcome.error or "", mode)
        outcomes.append(outcome)
    return _combine(tests, outcomes, mode)


def _box(config: SandboxConfig, limits: Limits, mode: SandboxMode) -> Box | str:
    if mode is SandboxMode.UNSAFE_LOCAL:
        return Box([sys.executable, "-I", "-c", HARNESS.read_text()], {}, config.secrets)
    found = sandbox_probe(config)
    if found.jail is None:
        return found.detail
    argv = ("-I", "-S", "-c", HARNESS.read_text())
    command = found.jail.command(work_bytes=limits.work_mb << 20, argv=argv)
    return Box(command, found.jail.popen_user(), config.secrets)


def _sandbox_failed(detail: str, mode: SandboxMode) -> SandboxResult:
    # The box never came up (namespaces exhausted, binary replaced): not the answer's
    # failure. Forget the probe so the next evaluation finds out afresh.
    log.error("sandbox_failed detail=%r code_tests=not_evaluable", detail[-300:])
    probe.cache_clear()
    return SandboxResult("unavailable", solution_error=detail[-500:], isolation=mode.value)


def _combine(
    tests: Sequence[CodeTest], outcomes: list[BoxResult], mode: SandboxMode
) -> SandboxResult:
    # With no tests one box ran the solution alone: it has a status, not a test entry.
    pairs = zip(tests, outcomes, strict=True) if tests else ()
    named = [{"name": t.name, "passed": o.status == "passed", "error": o.error} for t, o in pairs]
    solution_error = next((o.solution_error for o in outcomes if o.solution_error), None)
    statuses = {o.status for o in outcomes}
    status = next((s for s in ("timeout", "crashed", "failed") if s in statuses), "passed")
    shown = next((o for o in outcomes if o.status != "passed"), outcomes[-1])
    return SandboxResult(
        status,
        tests=named,
        solution_error=solution_error,
        stderr_tail=shown.stderr_tail,
        duration_s=round(sum(o.duration_s for o in outcomes), 4),
        isolation=mode.value,
    )


def _rlimits(limits: Limits, total_mb: int, *, nproc: bool) -> dict[str, int]:
    # Applied by the harness itself before the answer runs: a preexec_fn would do the
    # same between fork and exec, but is unsafe in a caller that has threads.
    memory_mb = min(limits.memory_mb, total_mb)
    rlimits = {
        "RLIMIT_AS": memory_mb << 20,
        "RLIMIT_CPU": int(limits.timeout_s) + 1,
        "RLIMIT_FSIZE": limits.max_file_mb << 20,
        "RLIMIT_NOFILE": 64,
        "RLIMIT_CORE": 0,
    }
    # Counted per user namespace and uid: inside the jail, this box's processes only.
    # Outside it the count would be the worker's own uid, so unsafe-local goes without.
    # Address space is per process: the process count keeps their sum within the total.
    if nproc:
        rlimits["RLIMIT_NPROC"] = max(1, min(limits.max_processes, total_mb // memory_mb))
    return rlimits
