"""The demo's moving parts: engine processes on their own cores, a server thread."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import uvicorn

from gate import logs
from gate.errors import ConfigError


def free_port() -> int:
    """Return a free port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def terminate_unwinds() -> Iterator[None]:
    """Make SIGTERM unwind the demo as Ctrl-C does, so each `finally` stops what it started.

    The engines run in their own sessions (no terminal signal reaches them); without this a
    demo ended by a service manager, a CI timeout or `kill` left them serving. Only the main
    thread can set a handler; elsewhere this changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class EngineProcess:
    """One `specgate engine` process serving one route."""

    def __init__(self, name: str, args: list[str], log_dir: Path) -> None:
        self.name = name
        self.port = free_port()
        self.log_path = log_dir / f"engine-{name}.log"
        self._log = self.log_path.open("wb")
        command = [sys.executable, "-m", "gate", "engine", "--port", str(self.port), *args]
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def base_url(self) -> str:
        """Return the engine's OpenAI base URL."""
        return f"http://127.0.0.1:{self.port}/v1"

    def wait_ready(self, timeout_s: float) -> None:
        """Wait until /v1/models answers; fail with the log's tail if the process died."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ConfigError(f"engine {self.name} exited: {self._tail()}")
            try:
                if httpx.get(self.base_url + "/models", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise ConfigError(f"engine {self.name} not ready after {timeout_s:.0f} s: {self._tail()}")

    def stop(self) -> None:
        """Stop the engine (and anything it started)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self._log.close()

    def _tail(self) -> str:
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
        return " | ".join(lines[-3:]) or "no output"


class ServerThread:
    """An ASGI app under uvicorn in a background thread of this process."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            log_config=logs.dict_config(),
            access_log=False,
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve()), name="specgate-demo", daemon=True
        )

    def start(self, timeout_s: float = 30) -> str:
        """Start serving; return the base URL."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise ConfigError("the demo gateway did not start")
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop serving; its lifespan flushes spans and drains evaluations."""
        self._server.should_exit = True
        self._thread.join(60)


def cpu_cores() -> list[int]:
    """Return the CPUs this process may use."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
