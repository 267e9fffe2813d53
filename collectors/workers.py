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
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

from gate import logs
from gate.errors import ConfigError
from gate.telemetry.prometheus import use_multiprocess_mode, worker_exited

log = logging.getLogger(__name__)

# How long a worker has to write or spool what it holds once asked to stop.
SHUTDOWN_GRACE_S = 60.0

AppFactory = Callable[[], Any]


def serve(factory: AppFactory, *, workers: int, host: str, port: int, log_level: str) -> int:
    """Serve `factory()` on host:port, in this process or in `workers` processes (their
    settings come from the environment); return the exit code."""
    if workers == 1:
        # No access log: OTLP senders post every few seconds and would drown the events.
        uvicorn.run(
            factory(), host=host, port=port, log_level=log_level,
            log_config=logs.dict_config(), access_log=False,
        )  # fmt: skip
        return 0
    use_multiprocess_mode()
    return serve_workers(factory, workers=workers, host=host, port=port, log_level=log_level)


def serve_workers(
    factory: AppFactory, *, workers: int, host: str, port: int, log_level: str
) -> int:
    """Run `workers` processes serving `factory()` on host:port until a signal or a worker
    ends; return the exit code (0 after a signal, else the worker's)."""
    _refuse_a_taken_port(host, port)
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(
            target=_serve_one,
            args=(factory, host, port, log_level, os.getpid()),
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
                code = _exit_code(ended.exitcode)
                log.error("collector.worker_ended name=%s exitcode=%s", ended.name, code)
                break
    finally:
        started = {process.pid: process for process in processes if process.pid is not None}
        for process in started.values():
            if process.is_alive():
                process.terminate()  # uvicorn's graceful shutdown: flush, else spool
        for pid, process in started.items():
            process.join(SHUTDOWN_GRACE_S)
            if process.is_alive():
                log.error("collector.worker_killed name=%s", process.name)
                process.kill()
                process.join()
            worker_exited(pid)  # its queue and spool gauges, if it could not
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def _refuse_a_taken_port(host: str, port: int) -> None:
    # Every worker binds with SO_REUSEPORT, which would also share the port silently with
    # another collector still running there; a plain bind first finds it taken.
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no owner
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def _exit_code(exitcode: int | None) -> int:
    if exitcode is None or exitcode == 0:
        return 1  # a worker must not end on its own
    return exitcode if exitcode > 0 else 128 - exitcode  # killed by a signal


def _serve_one(factory: AppFactory, host: str, port: int, log_level: str, parent: int) -> None:
    logs.configure()  # a spawned process: nothing is configured yet
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    server = uvicorn.Server(
        uvicorn.Config(
            factory(),
            host=host,
            port=port,
            log_level=log_level,
            log_config=logs.dict_config(),
            access_log=False,
        )
    )
    threading.Thread(target=_exit_with, args=(parent, server), daemon=True).start()
    server.run(sockets=[sock])


def _exit_with(parent: int, server: uvicorn.Server) -> None:
    # A parent killed outright (SIGKILL) cannot stop its workers: they stop themselves,
    # gracefully, rather than serve on as orphans.
    while os.getppid() == parent:
        time.sleep(1.0)
    server.should_exit = True


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
