"""`specgate routes launch`: start the baseline and speculative vLLM servers of a route file,
wait until both answer, and register them as routes.

The route file's schema and the vLLM flags are in `gate.launch.route_file`, the servers'
processes in `gate.launch.servers`.

`--no-start` starts nothing and registers servers that already run (the Compose stack's
registration job); `--dry-run` prints the two commands. Registration is idempotent: a route
already registered with the same spec is kept, another spec under its name is refused.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from gate.cli.common import DatabaseOption, cli_actor, cli_transaction, read_yaml, settings_with
from gate.cli.gatecheck import parse_duration
from gate.db.enums import RouteRole
from gate.launch import servers as servers_mod
from gate.launch.route_file import RouteFile, parse_route_file, route_in, vllm_args
from gate.rollouts import routes
from gate.rollouts.schemas import RouteIn
from gate.routing.credentials import read_secret


def load_route_file(path: Path) -> RouteFile:
    """Read and validate a route file."""
    return parse_route_file(read_yaml(path, "route file"), str(path))


def register(spec: RouteIn, database_url: str | None) -> str:
    """Register a route, or keep the identical one already there; return what happened."""
    with cli_transaction(settings_with(database_url)) as db:
        route, done = routes.register_route(db, spec=spec, actor=cli_actor())
        if done is routes.Registered.CREATED:
            return f"route {route.id} {route.name} ({route.role.value}) -> {route.base_url}"
        return f"route {route.id} {route.name} already registered -> {route.base_url}"


def _warn(message: str) -> None:
    typer.echo(message, err=True)


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
    servers: list[servers_mod.Server] = []
    with servers_mod.signals_stop() as received:
        try:
            if not no_start:
                if endpoint is None:
                    typer.echo("no OTLP endpoint: vLLM's own llm_request spans are not sent")
                folder = log_dir or settings_with(database_url).home / "routes"
                servers_mod.start_both(routes, endpoint, folder, key_env, servers, typer.echo)
            targets = {entries[r].name: str(specs[r].base_url).rstrip("/") for r in roles}
            servers_mod.wait_ready(targets, timeout_s, servers, received, headers, typer.echo)
            for role in roles:
                typer.echo(register(specs[role], database_url))
        except BaseException:
            servers_mod.stop(servers)
            raise
        typer.echo(
            "next: specgate rollout create --name <name> "
            f"--alias {shlex.quote(routes.alias)} --baseline {shlex.quote(routes.baseline.name)} "
            f"--candidate {shlex.quote(routes.candidate.name)}"
        )
        if servers:
            typer.echo("serving; SIGTERM or Ctrl-C stops both servers")
            code = servers_mod.supervise(servers, received, _warn)
            if code:
                raise typer.Exit(code)
