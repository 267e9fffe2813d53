"""`specgate routes`: register, list, remove and launch routes without the API."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from sqlalchemy import select

from gate.cli.common import DatabaseOption, cli_actor, cli_transaction, settings_with
from gate.cli.routes_launch import launch
from gate.db.enums import RouteRole
from gate.db.models import Route
from gate.errors import BadRequest
from gate.rollouts import routes
from gate.rollouts.schemas import RouteAuth, RouteIn
from gate.routing.credentials import DEFAULT_HEADER, describe

app = typer.Typer(help="Register, list and remove routes.", no_args_is_help=True)


@app.command("add")
def add_route(
    name: Annotated[str, typer.Option()],
    base_url: Annotated[
        str,
        typer.Option(
            help="e.g. http://127.0.0.1:8000/v1. Under Argo Rollouts or Flagger, the baseline "
            "is the controller's stable (primary) Service and the candidate its canary "
            "Service: while the canary has no pods, the gateway skips it as down (calls "
            "recorded dropped, the baseline serves) and probes it again after a back-off."
        ),
    ],
    model: Annotated[str, typer.Option(help="The model name the route serves.")],
    role: Annotated[RouteRole, typer.Option()],
    metrics_url: Annotated[str | None, typer.Option(help="Prometheus /metrics URL.")] = None,
    spec_method: Annotated[str | None, typer.Option(help="ngram, eagle3, draft_model...")] = None,
    spec_tokens: Annotated[int | None, typer.Option(help="num_speculative_tokens.")] = None,
    auth: Annotated[
        str | None,
        typer.Option(
            help="Where the route's credential is: env:SPECGATE_ROUTE_<NAME> (a variable of "
            "the gateway and workers) or file:/path (a file in SPECGATE_ROUTE_SECRETS_DIR, "
            "e.g. a mounted Secret). Only this reference is stored.",
        ),
    ] = None,
    auth_header: Annotated[
        str,
        typer.Option(
            help="Header that carries it: 'Authorization' sends 'Bearer <secret>', any "
            "other header the secret as is (never one the gateway writes itself: Host, "
            "Content-Length, Transfer-Encoding, Connection, Content-Type, traceparent...)."
        ),
    ] = DEFAULT_HEADER,
    update: Annotated[
        bool,
        typer.Option(
            "--update",
            help="Change a registered route that differs (refused while a rollout uses it).",
        ),
    ] = False,
    database_url: DatabaseOption = None,
) -> None:
    """Register a route; the same spec again is a no-op, a different one an error unless
    --update."""
    try:
        spec = RouteIn(
            name=name,
            base_url=base_url,
            model=model,
            role=role,
            metrics_url=metrics_url,
            spec_method=spec_method,
            spec_tokens=spec_tokens,
            auth=RouteAuth(header=auth_header, source=auth) if auth else None,
        )
    except ValidationError as exc:
        raise BadRequest(f"route {name}: {exc}") from None
    with cli_transaction(settings_with(database_url)) as db:
        route, done = routes.register_route(db, spec=spec, actor=cli_actor(), update=update)
        line = f"route {route.id} {route.name} ({route.role.value}) -> {route.base_url}"
    typer.echo(f"{line} [{done.value}]")


@app.command("remove")
def remove_route(name: str, database_url: DatabaseOption = None) -> None:
    """Remove a route that no rollout uses."""
    with cli_transaction(settings_with(database_url)) as db:
        routes.remove_route(db, name=name, actor=cli_actor())
    typer.echo(f"route {name} removed")


@app.command("list")
def list_routes(database_url: DatabaseOption = None) -> None:
    """List routes."""
    table = Table("id", "name", "role", "model", "base_url", "spec", "metrics_url", "auth")
    with cli_transaction(settings_with(database_url)) as db:
        for r in db.scalars(select(Route).order_by(Route.id)):
            spec = f"{r.spec_method} k={r.spec_tokens}" if r.spec_method else "-"
            table.add_row(
                str(r.id),
                r.name,
                r.role.value,
                r.model,
                r.base_url,
                spec,
                r.metrics_url or "-",
                describe(r.auth),
            )
    Console().print(table)


app.command("launch")(launch)
