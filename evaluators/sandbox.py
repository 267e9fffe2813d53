"""Run untrusted Python against tests in a child process with limits and no network.

Containment, in layers: a fresh network namespace (`unshare -n`, or `unshare -rn`
without root) when the host allows one; an audit hook in the child that refuses sockets
and starting programs; rlimits on address space, CPU time, file size and open files; a
wall-clock deadline that kills the whole process group; an empty temporary directory as
cwd and HOME; a clean environment; `python -I`. The audit hook alone is not a security
boundary (native code can bypass it): run workers where the namespace is available.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

HARNESS = Path(__file__).with_name("sandbox_child.py")
_TAIL = 2000


@dataclass(frozen=True)
class Limits:
    """Resource limits for one run; `namespace=None` uses one when the host allows it."""

    timeout_s: float = 10.0
    memory_mb: int = 512
    max_file_mb: int = 16
    namespace: bool | None = None
    audit_hook: bool = True


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
    isolation: tuple[str, ...] = ()

    @property
    def passed_count(self) -> int:
        """Return how many tests passed."""
        return sum(1 for t in self.tests if t.get("passed"))


@lru_cache(maxsize=1)
def namespace_prefix() -> tuple[str, ...] | None:
    """Return the command prefix that gives a child its own empty network, if any works."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for prefix in ((unshare, "-n"), (unshare, "-r", "-n")):
        try:
            subprocess.run([*prefix, "true"], capture_output=True, timeout=10, check=True)
        except (OSError, subprocess.SubprocessError):
            continue
        return prefix
    return None


def run_python(solution: str, tests: Sequence[CodeTest], limits: Limits) -> SandboxResult:
    """Run `solution` then each test in a contained child; never raises for bad code."""
    prefix = namespace_prefix() if limits.namespace is not False else None
    if limits.namespace and prefix is None:
        return SandboxResult("unavailable", solution_error="no network namespace on this host")
    isolation = (("namespace",) if prefix else ()) + (("audit_hook",) if limits.audit_hook else ())
    nonce = secrets.token_hex(16)
    job = {
        "nonce": nonce,
        "audit": limits.audit_hook,
        "rlimits": _rlimits(limits),
        "solution": solution,
        "tests": [{"name": t.name, "code": t.code} for t in tests],
    }
    with tempfile.TemporaryDirectory(prefix="specgate-sandbox-") as workdir:
        started = time.monotonic()
        timed_out, crashed = _execute([*(prefix or ()), *_python()], job, limits, Path(workdir))
        duration = time.monotonic() - started
        stdout = Path(workdir, ".stdout").read_text(errors="replace")
        stderr = Path(workdir, ".stderr").read_text(errors="replace")[-_TAIL:]

    def result(status: str, **extra: Any) -> SandboxResult:
        return SandboxResult(
            status, stderr_tail=stderr, duration_s=round(duration, 4), isolation=isolation, **extra
        )

    if timed_out:
        return result("timeout")
    results = _results(stdout, nonce)
    if results is None:
        return result("crashed", solution_error=f"child exited without results ({crashed})")
    ok = results["solution_error"] is None and all(t["passed"] for t in results["tests"])
    return result(
        "passed" if ok else "failed",
        tests=results["tests"],
        solution_error=results["solution_error"],
    )


def _python() -> list[str]:
    # -I: ignore PYTHON* variables and user site-packages, and keep cwd off sys.path.
    return [sys.executable, "-I", str(HARNESS)]


def _execute(
    command: list[str], job: dict[str, Any], limits: Limits, workdir: Path
) -> tuple[bool, str]:
    home = str(workdir)
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8"}
    with open(workdir / ".stdout", "wb") as out, open(workdir / ".stderr", "wb") as err:
        child = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            cwd=workdir,
            env=env,
            start_new_session=True,
        )
        try:
            child.communicate(json.dumps(job).encode(), timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(child)
            return True, "timeout"
    return False, f"exit status {child.returncode}"


def _rlimits(limits: Limits) -> dict[str, int]:
    # Applied by the harness itself before the answer runs: a preexec_fn would do the
    # same between fork and exec, but is unsafe in a caller that has threads.
    return {
        "RLIMIT_AS": limits.memory_mb * 1024 * 1024,
        "RLIMIT_CPU": int(limits.timeout_s) + 1,
        "RLIMIT_FSIZE": limits.max_file_mb * 1024 * 1024,
        "RLIMIT_NOFILE": 64,
        "RLIMIT_CORE": 0,
    }


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _results(stdout: str, nonce: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(nonce + " "):
            parsed: dict[str, Any] = json.loads(line[len(nonce) + 1 :])
            return parsed
    return None
