"""The two vLLM servers `specgate routes launch` starts: start, wait until ready, supervise
and stop them, each in its own process group."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import httpx

from gate.db.enums import RouteRole
from gate.errors import ConfigError
from gate.launch.route_file import RouteFile, api_root, vllm_args

VLLM_INSTALL = "pip install 'specgate[vllm]'"
STOP_GRACE_S = 30.0
LOG_TAIL_CHARS = 2000
# Where progress lines go (the CLI passes typer's echo).
Echo = Callable[[str], None]


def vllm_executable() -> str:
    """Return the `vllm` command, or say how to install it."""
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(f"vLLM is not installed: run `{VLLM_INSTALL}` (on a GPU host)")
    found = shutil.which("vllm", path=str(Path(sys.executable).parent)) or shutil.which("vllm")
    if found is None:
        raise ConfigError(f"vLLM's `vllm` command is not on PATH: run `{VLLM_INSTALL}`")
    return found


@dataclass
class Server:
    """One launched vLLM server and its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        """Return the end of its log."""
        try:
            return self.log.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""


def start(name: str, command: list[str], env: dict[str, str], log: Path, echo: Echo) -> Server:
    """Start one server in its own process group, its output appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:
        process = subprocess.Popen(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,  # one process group per server, stopped as a whole
        )
    echo(f"started {name} (pid {process.pid}): {shlex.join(command)}  [log: {log}]")
    return Server(name, process, log)


def start_both(
    routes: RouteFile,
    endpoint: str | None,
    folder: Path,
    env: dict[str, str],
    servers: list[Server],
    echo: Echo,
) -> None:
    """Start the baseline's and the candidate's `vllm serve`, appending each to `servers` as
    it starts (so that the caller stops the first if the second fails)."""
    executable = vllm_executable()
    for role in (RouteRole.BASELINE, RouteRole.CANDIDATE):
        entry = routes.candidate if role is RouteRole.CANDIDATE else routes.baseline
        command = [executable, *vllm_args(routes, role, endpoint)]
        log = folder / f"{entry.name}.log"
        servers.append(start(entry.name, command, {**entry.env, **env}, log, echo))


def stop(servers: list[Server]) -> None:
    """Stop every server: SIGTERM to its group, SIGKILL after the grace period."""
    for server in servers:
        if server.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for server in servers:
        try:
            server.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(10)


def _ready(client: httpx.Client, base_url: str, headers: dict[str, str]) -> bool:
    """Whether the server answers /health (vLLM) or /v1/models with 200."""
    for url in (api_root(base_url) + "/health", base_url + "/models"):
        with contextlib.suppress(httpx.HTTPError):
            if client.get(url, headers=headers).status_code == 200:
                return True
    return False


def wait_ready(
    targets: dict[str, str],
    timeout_s: float,
    servers: list[Server],
    received: list[int] | None = None,
    headers: dict[str, str] | None = None,
    echo: Echo = print,
) -> None:
    """Wait until every target answers, a launched server exits, a signal arrives or the
    timeout passes."""
    deadline = time.monotonic() + timeout_s
    pending = dict(targets)
    with httpx.Client(timeout=2.0) as client:
        while pending:
            if received:
                raise ConfigError(f"stopped by signal {received[0]} before the servers were ready")
            for server in servers:
                if server.process.poll() is not None:
                    raise ConfigError(
                        f"{server.name} exited with status {server.process.returncode} before "
                        f"it was ready; the end of {server.log}:\n{server.tail()}"
                    )
            for name, url in list(pending.items()):
                if _ready(client, url, headers or {}):
                    echo(f"{name} is ready at {url}")
                    del pending[name]
            if not pending:
                return
            if time.monotonic() >= deadline:
                names = ", ".join(f"{n} ({u})" for n, u in pending.items())
                raise ConfigError(f"not ready after {timeout_s:g}s: {names}")
            time.sleep(1.0)


@contextlib.contextmanager
def signals_stop() -> Iterator[list[int]]:
    """Turn SIGTERM and SIGINT into a recorded request to stop."""
    received: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield received
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def supervise(servers: list[Server], received: list[int], warn: Echo) -> int:
    """Run until a signal (exit 0) or a server exits (exit 1); stop both either way."""
    try:
        while not received:
            for server in servers:
                if server.process.poll() is not None:
                    warn(
                        f"{server.name} exited with status {server.process.returncode}; "
                        f"stopping the other. The end of {server.log}:\n{server.tail()}"
                    )
                    return 1
            time.sleep(0.5)
        return 0
    finally:
        stop(servers)
