"""Run untrusted Python against tests, boxed by bubblewrap (see `evaluators.jail`).

Fail closed: without a working jail nothing runs and the result says `unavailable`;
the weaker `unsafe-local` mode (a `python -I` child with rlimits and an audit hook, no
namespaces) runs only when a policy names it. Inside the jail the harness applies rlimits
(CPU, address space, file size, open files, processes) before the answer runs; the
worker kills the whole box at the wall-clock deadline. What is kept of a run (errors,
stderr) is size-bounded and scrubbed of the process's configured secrets.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from evaluators.jail import Probe, probe
from evaluators.secrets import scrub

HARNESS = Path(__file__).with_name("sandbox_child.py")
_TAIL = 2000
_ERROR_CHARS = 500


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
    max_processes: int = 32


@dataclass(frozen=True)
class SandboxConfig:
    """This process's sandbox settings: the bwrap binary, the uid, what to scrub."""

    bwrap: str = "bwrap"
    uid: int = 65534
    secrets: tuple[str, ...] = ()


class _Config:
    current = SandboxConfig()


def configure(config: SandboxConfig) -> None:
    """Set this process's sandbox settings (worker start-up, from `Settings`)."""
    _Config.current = config


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
    """Run `solution` then each test in a contained child; never raises for bad code."""
    config = current_config()
    if mode is SandboxMode.UNSAFE_LOCAL:
        command: list[str] = [sys.executable, "-I", "-c", HARNESS.read_text()]
        popen: dict[str, Any] = {}
    else:
        found = sandbox_probe(config)
        if found.jail is None:
            return SandboxResult("unavailable", solution_error=found.detail)
        jail = found.jail
        argv = ("-I", "-S", "-c", HARNESS.read_text())
        command = jail.command(work_bytes=limits.work_mb << 20, argv=argv)
        popen = jail.popen_user()
    job = _job(solution, tests, limits, audit=mode is SandboxMode.UNSAFE_LOCAL)
    return _run(command, popen, job, limits, mode, config.secrets)


def _job(
    solution: str, tests: Sequence[CodeTest], limits: Limits, *, audit: bool
) -> dict[str, Any]:
    return {
        "nonce": secrets.token_hex(16),
        "audit": audit,
        "rlimits": _rlimits(limits, nproc=not audit),
        "solution": solution,
        "tests": [{"name": t.name, "code": t.code} for t in tests],
    }


def _run(
    command: list[str],
    popen: dict[str, Any],
    job: dict[str, Any],
    limits: Limits,
    mode: SandboxMode,
    hidden: tuple[str, ...],
) -> SandboxResult:
    with tempfile.TemporaryDirectory(prefix="specgate-sandbox-") as outdir:
        started = time.monotonic()
        timed_out, exit_detail = _execute(command, popen, job, limits, Path(outdir))
        duration = round(time.monotonic() - started, 4)
        stdout = Path(outdir, "stdout").read_text(errors="replace")
        # Scrubbed whole, then cut: a cut first could leave part of a secret behind.
        stderr = scrub(Path(outdir, "stderr").read_text(errors="replace"), hidden)[-_TAIL:]

    def result(status: str, **extra: Any) -> SandboxResult:
        return SandboxResult(
            status, stderr_tail=stderr, duration_s=duration, isolation=mode.value, **extra
        )

    if timed_out:
        return result("timeout")
    results = _results(stdout, job["nonce"])
    if results is None:
        return result("crashed", solution_error=f"child exited without results ({exit_detail})")
    tests = [{**t, "error": _clean(t["error"], hidden)} for t in results["tests"]]
    error = _clean(results["solution_error"], hidden)
    ok = error is None and all(t["passed"] for t in tests)
    return result("passed" if ok else "failed", tests=tests, solution_error=error)


def _clean(text: str | None, hidden: tuple[str, ...]) -> str | None:
    return None if text is None else scrub(str(text), hidden)[:_ERROR_CHARS]


def _execute(
    command: list[str], popen: dict[str, Any], job: dict[str, Any], limits: Limits, outdir: Path
) -> tuple[bool, str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(outdir), "TMPDIR": str(outdir), "LANG": "C.UTF-8"}
    with open(outdir / "stdout", "wb") as out, open(outdir / "stderr", "wb") as err:
        # Its own process group, so the deadline kills bwrap (and with it the box) or,
        # in unsafe-local mode, the child and what it started in that group.
        child = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            cwd=outdir,
            env=env,
            start_new_session=True,
            **popen,
        )
        try:
            child.communicate(json.dumps(job).encode(), timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            return True, "timeout"
        finally:
            _kill_group(child)
    return False, f"exit status {child.returncode}"


def _rlimits(limits: Limits, *, nproc: bool) -> dict[str, int]:
    # Applied by the harness itself before the answer runs: a preexec_fn would do the
    # same between fork and exec, but is unsafe in a caller that has threads.
    rlimits = {
        "RLIMIT_AS": limits.memory_mb * 1024 * 1024,
        "RLIMIT_CPU": int(limits.timeout_s) + 1,
        "RLIMIT_FSIZE": limits.max_file_mb * 1024 * 1024,
        "RLIMIT_NOFILE": 64,
        "RLIMIT_CORE": 0,
    }
    # Counted per user namespace and uid: inside the jail, this box's processes only.
    # Outside it the count would be the worker's own uid, so unsafe-local goes without.
    if nproc:
        rlimits["RLIMIT_NPROC"] = limits.max_processes
    return rlimits


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _results(stdout: str, nonce: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(nonce + " "):
            with contextlib.suppress(ValueError):
                parsed: dict[str, Any] = json.loads(line[len(nonce) + 1 :])
                return parsed
    return None
