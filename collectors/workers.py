"""Several collector processes on one port, each with its own listening socket.

uvicorn's own `--workers` shares one listening socket between its processes, and asyncio
accepts every pending connection in one go: a handful of long-lived OTLP connections
(one per exporter) then all land on the first worker to wake, and the others idle. Here
each worker binds its own socket with `SO_REUSEPORT`, so the kernel spreads connections
over the workers by address hash, and every worker decodes and writes on its own core.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

log = logging.getLogger(__name__)

AppFactory = Callable[[], Any]


def serve_workers(
    factory: AppFactory, *, workers: int, host: str, port: int, log_level: str
) -> int:
    """Run `workers` processes serving `factory()` on host:port until a signal or a worker
    ends; return the exit code (0 after a signal, else the worker's)."""
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(
            target=_serve_one,
            args=(factory, host, port, log_level),
            name=f"specgate-collector-{index}",
        )
        for index in range(workers)
    ]
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    code = 0
    try:
        for process in processes:
            process.start()
        while not stopping.wait(0.5):
            ended = next((p for p in processes if not p.is_alive()), None)
            if ended is not None:
                # No silent restarts: the collector ends and its supervisor restarts it,
                # after the other workers have written or spooled what they hold.
                code = ended.exitcode or 1
                log.error("collector.worker_ended name=%s exitcode=%s", ended.name, code)
                break
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()  # uvicorn's graceful shutdown: flush, else spool
        for process in processes:
            process.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def _serve_one(factory: AppFactory, host: str, port: int, log_level: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    config = uvicorn.Config(factory(), host=host, port=port, log_level=log_level, access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
