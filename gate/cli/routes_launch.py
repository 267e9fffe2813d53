"""`specgate routes launch`: start the baseline and speculative vLLM servers of a route file,
wait until both answer, and register them as routes.

A route file (YAML) names the model alias clients ask the gateway for and the two servers:

    alias: llama-8b                    # both servers answer to it (--served-model-name)
    host: 0.0.0.0                      # where the servers bind (default 127.0.0.1)
    advertise_host: gpu-01.internal    # how the gateway reaches them (default: host)
    otlp_traces_endpoint: http://otel-collector:4317
    baseline:
      name: llama-8b-base
      model: meta-llama/Llama-3.1-8B-Instruct
      port: 8000
      env: {CUDA_VISIBLE_DEVICES: "0"}
    candidate:
      name: llama-8b-ngram
      model: meta-llama/Llama-3.1-8B-Instruct
      port: 8001
      env: {CUDA_VISIBLE_DEVICES: "1"}
      speculative_config: {method: ngram, num_speculative_tokens: 4, prompt_lookup_max: 4}

Both servers get `--enable-per-request-metrics` and `--otlp-traces-endpoint`; only the
speculative one gets `--speculative-config` and `--per-request-spec-decode-metrics summary`
(vLLM refuses to start with that flag and no speculative config). The gateway forwards the
client's body as it is, so both servers must answer to the alias; each is served as
`--served-model-name <route name> <alias>`: vLLM answers to either name and labels its
metrics with the first (`model_name`), so dashboards tell the baseline from the candidate.
A route's `url` replaces the derived `http://advertise_host:port/v1` (Compose and
Kubernetes, where each server has its own host name).

`--no-start` starts nothing and registers servers that already run (the Compose stack's
registration job); `--dry-run` prints the two commands. Registration is idempotent: a route
already registered with the same spec is kept, another spec under its name is refused.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import httpx
import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gate.cli.common import DatabaseOption, cli_actor, cli_transaction, read_yaml, settings_with
from gate.cli.gatecheck import parse_duration
from gate.db.enums import RouteRole
from gate.errors import BadRequest, ConfigError, InputMalformed
from gate.rollouts import routes
from gate.rollouts.schemas import RouteIn
from gate.routing.credentials import read_secret
from gate.stats.policy import summary

VLLM_INSTALL = "pip install 'specgate[vllm]'"
STOP_GRACE_S = 30.0
LOG_TAIL_CHARS = 2000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RouteEntry(_Strict):
    """One vLLM server of the route file."""

    name: str = Field(min_length=1, max_length=128)
    model: str = Field(min_length=1, description="What vLLM loads: a hub id or a local path.")
    port: int = Field(ge=1, le=65535)
    url: str | None = Field(None, description="Base URL others reach it at (ends in /v1).")
    speculative_config: dict[str, Any] | None = None
    args: list[str] = Field(default_factory=list, description="Further `vllm serve` flags.")
    env: dict[str, str] = Field(default_factory=dict, description="e.g. CUDA_VISIBLE_DEVICES.")


class RouteFile(_Strict):
    """A baseline and a speculative candidate answering to one alias."""

    alias: str = Field(min_length=1, max_length=256)
    host: str = "127.0.0.1"
    advertise_host: str | None = None
    otlp_traces_endpoint: str | None = None
    baseline: RouteEntry
    candidate: RouteEntry

    @model_validator(mode="after")
    def _check(self) -> RouteFile:
        if self.baseline.speculative_config:
            raise ValueError("the baseline must not have a speculative_config")
        config = self.candidate.speculative_config
        if not config or not isinstance(config.get("method"), str):
            raise ValueError("the candidate needs a speculative_config with a 'method'")
        if self.baseline.name == self.candidate.name:
            raise ValueError("the baseline and the candidate need different names")
        if self.baseline.port == self.candidate.port and not (
            self.baseline.url and self.candidate.url
        ):
            raise ValueError("the baseline and the candidate need different ports")
        return self

    def base_url(self, entry: RouteEntry) -> str:
        """Return where the gateway reaches `entry` (its OpenAI base URL, ending in /v1)."""
        if entry.url:
            return entry.url.rstrip("/")
        host = self.advertise_host or ("127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{entry.port}/v1"


def load_route_file(path: Path) -> RouteFile:
    """Read and validate a route file."""
    data = read_yaml(path, "route file")
    try:
        return RouteFile.model_validate(data)
    except ValidationError as exc:
        raise InputMalformed(f"route file {path}: {summary(exc)}") from None


def vllm_args(routes: RouteFile, role: RouteRole, otlp_endpoint: str | None) -> list[str]:
    """Return the `vllm serve` arguments of one route (everything after `vllm`)."""
    entry = routes.candidate if role is RouteRole.CANDIDATE else routes.baseline
    args = ["serve", entry.model, "--host", routes.host, "--port", str(entry.port)]
    # The route's own name first: vLLM labels its metrics with the first served name.
    args += ["--served-model-name", entry.name, routes.alias, "--enable-per-request-metrics"]
    if otlp_endpoint:
        args += ["--otlp-traces-endpoint", otlp_endpoint]
    if entry.speculative_config:
        spec = json.dumps(entry.speculative_config, separators=(",", ":"), sort_keys=True)
        args += ["--speculative-config", spec, "--per-request-spec-decode-metrics", "summary"]
    return args + list(entry.args)


def route_in(routes: RouteFile, role: RouteRole, api_key: str | None = None) -> RouteIn:
    """Return the route to register for one server of the file (with `api_key`, a
    credential source, as its bearer token)."""
    entry = routes.candidate if role is RouteRole.CANDIDATE else routes.baseline
    base = routes.base_url(entry)
    config = dict(entry.speculative_config or {})
    tokens = config.get("num_speculative_tokens")
    draft = config.get("model")
    try:
        return RouteIn.model_validate(
            {
                "name": entry.name,
                "base_url": base,
                "model": routes.alias,
                "role": role,
                "metrics_url": _root(base) + "/metrics",
                "spec_method": config.get("method"),
                "spec_tokens": tokens if isinstance(tokens, int) else None,
                "draft_model": draft if isinstance(draft, str) else None,
                "spec_config": config,
                "auth": {"source": api_key} if api_key else None,
            }
        )
    except ValidationError as exc:
        raise BadRequest(f"route {entry.name}: {exc}") from None


def _root(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def register(spec: RouteIn, database_url: str | None) -> str:
    """Register a route, or keep the identical one already there; return what happened."""
    with cli_transaction(settings_with(database_url)) as db:
        route, done = routes.register_route(db, spec=spec, actor=cli_actor())
        if done is routes.Registered.CREATED:
            return f"route {route.id} {route.name} ({route.role.value}) -> {route.base_url}"
        return f"route {route.id} {route.name} already registered -> {route.base_url}"


def _vllm_executable() -> str:
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


def _start(name: str, command: list[str], env: dict[str, str], log: Path) -> Server:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:
        process = subprocess.Popen(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,  # one process group per server, stopped as a whole
        )
    typer.echo(f"started {name} (pid {process.pid}): {shlex.join(command)}  [log: {log}]")
    return Server(name, process, log)


def _stop(servers: list[Server]) -> None:
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
    for url in (_root(base_url) + "/health", base_url + "/models"):
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
                    typer.echo(f"{name} is ready at {url}")
                    del pending[name]
            if not pending:
                return
            if time.monotonic() >= deadline:
                names = ", ".join(f"{n} ({u})" for n, u in pending.items())
                raise ConfigError(f"not ready after {timeout_s:g}s: {names}")
            time.sleep(1.0)


@contextlib.contextmanager
def _signals_stop() -> Iterator[list[int]]:
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


def _supervise(servers: list[Server], received: list[int]) -> int:
    """Run until a signal (exit 0) or a server exits (exit 1); stop both either way."""
    try:
        while not received:
            for server in servers:
                if server.process.poll() is not None:
                    typer.echo(
                        f"{server.name} exited with status {server.process.returncode}; "
                        f"stopping the other. The end of {server.log}:\n{server.tail()}",
                        err=True,
                    )
                    return 1
            time.sleep(0.5)
        return 0
    finally:
        _stop(servers)


def launch(
    route_file: Annotated[
        Path,
        typer.Option(
            "--route-file",
            "-f",
            help="Route file (YAML): alias, baseline and candidate with name, model, port, "
            "speculative_config.",
        ),
    ],
    otlp_traces_endpoint: Annotated[
        str | None,
        typer.Option(help="vLLM's --otlp-traces-endpoint (default: the route file's)."),
    ] = None,
    ready_timeout: Annotated[
        str, typer.Option(help="Give up when a server is not ready by then (90s, 20m...).")
    ] = "20m",
    log_dir: Annotated[
        Path | None,
        typer.Option(help="Folder for the servers' logs (default: $SPECGATE_HOME/routes)."),
    ] = None,
    no_start: Annotated[
        bool,
        typer.Option(
            "--no-start",
            help="Start nothing: wait for servers already running, then register them.",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the two vLLM commands and exit.")
    ] = False,
    api_key: Annotated[
        str | None,
        typer.Option(
            help="Where the servers' API key is: env:SPECGATE_ROUTE_<NAME> or file:/path (in "
            "SPECGATE_ROUTE_SECRETS_DIR). The servers get it "
            "as VLLM_API_KEY (never on their command line) and the routes are registered "
            "with it as their bearer token; only this reference is stored.",
        ),
    ] = None,
    database_url: DatabaseOption = None,
) -> None:
    """Start the baseline and speculative vLLM servers of a route file, wait until both are
    ready and register both routes (needs the `vllm` extra unless --no-start)."""
    routes = load_route_file(route_file)
    endpoint = otlp_traces_endpoint or routes.otlp_traces_endpoint
    timeout_s = parse_duration(ready_timeout)
    roles = (RouteRole.BASELINE, RouteRole.CANDIDATE)
    entries = {RouteRole.BASELINE: routes.baseline, RouteRole.CANDIDATE: routes.candidate}
    if dry_run:
        for role in roles:
            typer.echo(shlex.join(["vllm", *vllm_args(routes, role, endpoint)]))
        return
    specs = {role: route_in(routes, role, api_key) for role in roles}
    # Read now: a missing key fails before any server starts.
    secrets_dir = settings_with(database_url).route_secrets_dir
    secret = read_secret(api_key, secrets_dir) if api_key else None
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    key_env = {"VLLM_API_KEY": secret} if secret else {}
    servers: list[Server] = []
    with _signals_stop() as received:
        try:
            if not no_start:
                if endpoint is None:
                    typer.echo("no OTLP endpoint: vLLM's own llm_request spans are not sent")
                executable = _vllm_executable()
                folder = log_dir or settings_with(database_url).home / "routes"
                for role in roles:
                    entry = entries[role]
                    command = [executable, *vllm_args(routes, role, endpoint)]
                    env = {**entry.env, **key_env}
                    servers.append(_start(entry.name, command, env, folder / f"{entry.name}.log"))
            targets = {entries[r].name: str(specs[r].base_url).rstrip("/") for r in roles}
            wait_ready(targets, timeout_s, servers, received, headers)
            for role in roles:
                typer.echo(register(specs[role], database_url))
        except BaseException:
            _stop(servers)
            raise
        typer.echo(
            "next: specgate rollout create --name <name> "
            f"--alias {shlex.quote(routes.alias)} --baseline {shlex.quote(routes.baseline.name)} "
            f"--candidate {shlex.quote(routes.candidate.name)}"
        )
        if servers:
            typer.echo("serving; SIGTERM or Ctrl-C stops both servers")
            code = _supervise(servers, received)
            if code:
                raise typer.Exit(code)
