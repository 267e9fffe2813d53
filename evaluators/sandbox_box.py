"""One boxed run of the harness: start it, kill it at its deadline, and judge its output.

The worker trusts nothing the box prints. A run counts only if the harness announced
itself (`<nonce> started`, written before any untrusted code runs), printed exactly one
well-formed result line and exited with status 0; everything else is the answer's crash.
Without the announcement the answer never ran: the sandbox itself failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluators.secrets import scrub

_TAIL = 2000
_ERROR_CHARS = 500


@dataclass(frozen=True)
class Box:
    """How to start one box: the command, Popen extras, and what to scrub from output."""

    command: list[str]
    popen: dict[str, Any]
    hidden: tuple[str, ...]


@dataclass(frozen=True)
class BoxResult:
    """One box's verdict: `passed`, `failed`, `timeout`, `crashed` or `unavailable`."""

    status: str
    error: str | None = None
    solution_error: str | None = None
    stderr_tail: str = ""
    duration_s: float = 0.0


def run_box(box: Box, job: dict[str, Any], timeout_s: float) -> BoxResult:
    """Run `job` (solution and at most one test) in a fresh box; never raises for bad code."""
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="specgate-sandbox-") as outdir:
        started = time.monotonic()
        timed_out, exit_status = _execute(box, {**job, "nonce": nonce}, timeout_s, Path(outdir))
        duration = round(time.monotonic() - started, 4)
        lines = Path(outdir, "stdout").read_text(errors="replace").splitlines()
        # Scrubbed whole, then cut: a cut first could leave part of a secret behind.
        stderr = scrub(Path(outdir, "stderr").read_text(errors="replace"), box.hidden)[-_TAIL:]
    if lines[:1] != [f"{nonce} started"]:
        detail = "timed out" if timed_out else f"exit status {exit_status}"
        return BoxResult("unavailable", error=f"the sandbox did not start ({detail}): {stderr}")
    if timed_out:
        return BoxResult("timeout", "timeout", stderr_tail=stderr, duration_s=duration)
    return _judge(lines[1:], nonce, exit_status, box.hidden, stderr, duration)


def _judge(
    lines: list[str],
    nonce: str,
    exit_status: int | None,
    hidden: tuple[str, ...],
    stderr: str,
    duration: float,
) -> BoxResult:
    found = [line[len(nonce) + 1 :] for line in lines if line.startswith(nonce + " ")]
    parsed = _result(found[0]) if len(found) == 1 else None
    if parsed is None or exit_status != 0:
        why = f"no single valid result, exit status {exit_status}"
        return BoxResult("crashed", f"crashed: {why}", stderr_tail=stderr, duration_s=duration)
    passed, error, solution_error = parsed
    return BoxResult(
        "passed" if passed else "failed",
        clean(error, hidden),
        clean(solution_error, hidden),
        stderr,
        duration,
    )


def _result(line: str) -> tuple[bool, str | None, str | None] | None:
    # Exactly the harness's shape or nothing: unknown keys are dropped, wrong types void it.
    try:
        raw = json.loads(line)
    except ValueError:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("passed"), bool):
        return None
    error, solution_error = raw.get("error"), raw.get("solution_error")
    if not all(v is None or isinstance(v, str) for v in (error, solution_error)):
        return None
    return raw["passed"] and solution_error is None, error, solution_error


def clean(text: str | None, hidden: tuple[str, ...]) -> str | None:
    """Return `text` scrubbed of `hidden` values and cut to the stored size."""
    return None if text is None else scrub(str(text), hidden)[:_ERROR_CHARS]


def _execute(
    box: Box, job: dict[str, Any], timeout_s: float, outdir: Path
) -> tuple[bool, int | None]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(outdir), "TMPDIR": str(outdir), "LANG": "C.UTF-8"}
    with open(outdir / "stdout", "wb") as out, open(outdir / "stderr", "wb") as err:
        # Its own process group, so the deadline kills bwrap (and with it the box) or,
        # in unsafe-local mode, the child and what it started in that group.
        child = subprocess.Popen(
            box.command,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            cwd=outdir,
            env=env,
            start_new_session=True,
            **box.popen,
        )
        try:
            child.communicate(json.dumps(job).encode(), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return True, None
        finally:
            _kill_group(child)
    return False, child.returncode


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()
