"""Prometheus exposition shared by processes that may run as several uvicorn workers."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def use_multiprocess_mode() -> None:
    """Give worker processes started after this call a shared metrics folder.

    prometheus_client picks its value store when it is first imported, so this must run in
    the parent before the workers start; every worker then writes there and `/metrics`,
    whichever worker answers, sums them.
    """
    if not os.environ.get(MULTIPROC_ENV):
        folder = tempfile.mkdtemp(prefix="specgate-prom-")
        os.environ[MULTIPROC_ENV] = folder
        atexit.register(shutil.rmtree, folder, ignore_errors=True)


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    """Render `registry`; in multiprocess mode, every worker's values instead."""
    if os.environ.get(MULTIPROC_ENV):
        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
        return generate_latest(merged), CONTENT_TYPE_LATEST
    return generate_latest(registry), CONTENT_TYPE_LATEST


def worker_exited(pid: int) -> None:
    """Drop an ended worker's live gauges from the shared folder."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
