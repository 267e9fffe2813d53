"""`specgate rollout controller`: tie a rollout to Argo Rollouts or Flagger."""

from __future__ import annotations

from typing import Annotated

import typer

from gate.cli.common import DatabaseOption, cli_actor, cli_transaction, settings_with
from gate.controllers.links import link_rollout
from gate.db.models import ControllerKind


def controller(
    rollout_id: int,
    kind: Annotated[ControllerKind, typer.Option("--controller", help="Who moves the pods.")],
    poll_interval_s: Annotated[
        float, typer.Option(min=1.0, help="The controller's analysis interval, in seconds.")
    ] = 60.0,
    missed_polls: Annotated[
        int, typer.Option(min=1, help="Missed check-ins after which specgate holds the rollout.")
    ] = 5,
    analysis_key: Annotated[
        str | None,
        typer.Option(
            help="Name of the API key the controller polls the analysis with (required for"
            " argo-rollouts): only its polls count as check-ins."
        ),
    ] = None,
    database_url: DatabaseOption = None,
) -> None:
    """Link a rollout to its controller; for Flagger, print a new hook token once."""
    settings = settings_with(database_url)
    with cli_transaction(settings) as db:
        _, token = link_rollout(
            db,
            rollout_id=rollout_id,
            controller=kind,
            poll_interval_s=poll_interval_s,
            missed_polls=missed_polls,
            analysis_key=analysis_key,
            secret_key=settings.secret_key.get_secret_value(),
            actor=cli_actor(),
        )
    typer.echo(
        f"rollout {rollout_id} linked to {kind.value}; held after {missed_polls} missed "
        f"check-ins of {poll_interval_s:.0f} s (counted from its first check-in)"
    )
    if token:
        typer.echo(f"hook token (shown once; store it in a Secret, never in git):\n{token}")
