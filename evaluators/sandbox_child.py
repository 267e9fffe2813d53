"""The harness the sandbox runs in the child process; standard library only.

It reads one JSON job from stdin (nonce, solution, tests, rlimits, whether to install
the audit hook), applies the rlimits, runs the solution once and each test in a copy of
its namespace, and prints one line `<nonce> <json results>` on the original stdout. The
nonce keeps output the solution prints from being taken for results. The audit hook is
for the `unsafe-local` mode only: inside the jail the namespaces are the boundary.
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
        failure = f"solution: {_describe(exc)}"
        return {"solution_error": failure, "tests": []}
    results = []
    for test in job["tests"]:
        scope = dict(namespace)
        try:
            exec(compile(test["code"], f"test_{test['name']}.py", "exec"), scope)
            results.append({"name": test["name"], "passed": True, "error": None})
        except BaseException as exc:
            results.append({"name": test["name"], "passed": False, "error": _describe(exc)})
    return {"solution_error": None, "tests": results}


def _limit(rlimits: dict[str, int]) -> None:
    for name, value in rlimits.items():
        resource.setrlimit(getattr(resource, name), (value, value))


def main() -> None:
    """Run one job from stdin and print its results."""
    job = json.loads(sys.stdin.read())
    _limit(job.get("rlimits", {}))
    results_out = os.fdopen(os.dup(1), "w")
    # What the solution prints is discarded, never mixed into the results line.
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (lives as long as the process)
    if job.get("audit", True):
        sys.addaudithook(_refuse_escapes)
    results = _run(job)
    results_out.write(f"{job['nonce']} {json.dumps(results)}\n")
    results_out.flush()


if __name__ == "__main__":
    main()
