"""Heartbeat files of the Celery worker and beat, and the liveness check that reads them.

The worker's main process writes `worker.heartbeat` on each Celery heartbeat (a timer in
its event loop), the beat writes `beat.heartbeat` on each scheduler tick; each file holds
the writer's pid. A process that hangs stops writing, and `python -m gate.worker.heartbeat
worker beat` fails once a file is older than `--max-age`: Compose health checks and
Kubernetes liveness probes run it. This module imports nothing heavy at load time, so the
check costs a fraction of a second.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

FILES = {"worker": "worker.heartbeat", "beat": "beat.heartbeat"}
DEFAULT_MAX_AGE_S = 120.0


def heartbeat_path(home: Path, component: str) -> Path:
    """Return where `component` ("worker" or "beat") writes its heartbeat."""
    return home / FILES[component]


def beat(path: Path) -> None:
    """Record that this process is alive (atomically, so a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(f"{os.getpid()}\n")
    os.replace(partial, path)


def problems(home: Path, components: list[str], max_age_s: float) -> list[str]:
    """Return why each component is not alive (empty when all are)."""
    found = []
    now = time.time()
    for component in components:
        path = heartbeat_path(home, component)
        try:
            age = now - path.stat().st_mtime
        except FileNotFoundError:
            found.append(f"{component}: no heartbeat yet at {path}")
            continue
        if age > max_age_s:
            found.append(f"{component}: last heartbeat {age:.0f}s ago (limit {max_age_s:g}s)")
    return found


def install_worker_heartbeat(home: Path) -> None:
    """Write the worker's heartbeat file on every Celery heartbeat of this process."""
    from celery.signals import heartbeat_sent

    path = heartbeat_path(home, "worker")

    def on_heartbeat(**_: Any) -> None:
        beat(path)

    heartbeat_sent.connect(on_heartbeat, weak=False)


def _default_home() -> Path:
    from gate.settings import load_settings

    return load_settings().home


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when every named component's heartbeat is fresh, else print why and exit 1."""
    parser = argparse.ArgumentParser(
        prog="python -m gate.worker.heartbeat",
        description="Liveness of the specgate worker and beat (their heartbeat files).",
    )
    parser.add_argument("components", nargs="+", choices=sorted(FILES))
    parser.add_argument("--max-age", type=float, default=DEFAULT_MAX_AGE_S, help="seconds")
    parser.add_argument("--home", type=Path, default=None, help="default: SPECGATE_HOME")
    args = parser.parse_args(argv)
    found = problems(args.home or _default_home(), args.components, args.max_age)
    for line in found:
        print(f"not alive: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
