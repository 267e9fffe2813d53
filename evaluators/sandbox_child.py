"""The harness the sandbox runs in the child process; standard library only.

It reads one JSON job from stdin (nonce, solution, at most one test, rlimits, whether to
install the audit hook), prints `<nonce> started` on the original stdout, applies the
rlimits, runs the solution and then the test in the solution's namespace, and prints one
line `<nonce> <json result>`. Each test gets a fresh interpreter (and its own box) of
its own, so the answer never sees another test, nor a nonce that would vouch for one.
The `started` line tells the worker that the box came up: without it, a failure is the
sandbox's, not the answer's. The audit hook is for the `unsafe-local` mode only: inside
the jail the namespaces are the boundary.
It runs as `python -I -S -c <this file>`, under whatever Python 3 the jail found.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import traceback
from typing import Any

# Audit events that open the network or start programs outside the harness's control.
_BLOCKED_PREFIXES = ("socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.spawn", "pty.")
_BLOCKED_EVENTS = frozenset({"os.system", "os.fork", "os.forkpty", "ctypes.dlopen"})


def _refuse_escapes(event: str, _args: tuple[Any, ...]) -> None:
    if event in _BLOCKED_EVENTS or event.startswith(_BLOCKED_PREFIXES):
        raise PermissionError(f"sandbox: {event} is not allowed")


def _describe(exc: BaseException) -> str:
    # Generous: the worker scrubs secrets out of the whole text before it keeps 500
    # characters, so no cut here can leave a piece of a secret in what is stored.
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return last[:65536]


def _run(job: dict[str, Any]) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    try:
        exec(compile(job["solution"], "solution.py", "exec"), namespace)
    except BaseException as exc:  # the answer may raise anything, SystemExit included
        return {"solution_error": f"solution: {_describe(exc)}", "passed": False, "error": None}
    test = job.get("test")
    if test is None:
        return {"solution_error": None, "passed": True, "error": None}
    try:
        exec(compile(test["code"], f"test_{test['name']}.py", "exec"), namespace)
    except BaseException as exc:
        return {"solution_error": None, "passed": False, "error": _describe(exc)}
    return {"solution_error": None, "passed": True, "error": None}


def _limit(rlimits: dict[str, int]) -> None:
    for name, value in rlimits.items():
        resource.setrlimit(getattr(resource, name), (value, value))


def main() -> None:
    """Run one job from stdin and print its result."""
    job = json.loads(sys.stdin.read())
    results_out = os.fdopen(os.dup(1), "w")
    results_out.write(f"{job['nonce']} started\n")
    results_out.flush()
    _limit(job.get("rlimits", {}))
    # What the solution prints is discarded, never mixed into the result line.
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (lives as long as the process)
    if job.get("audit", True):
        sys.addaudithook(_refuse_escapes)
    result = _run(job)
    results_out.write(f"{job['nonce']} {json.dumps(result)}\n")
    results_out.flush()


if __name__ == "__main__":
    main()
