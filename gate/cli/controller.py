"""`specgate rollout controller`: tie a rollout to Argo Rollouts, Flagger or its traffic objects."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from gate.cli.common import DatabaseOption, cli_actor, cli_transaction, read_yaml, settings_with
from gate.controllers.links import link_rollout
from gate.controllers.targets import HttpRouteTarget, KServeTarget, notes
from gate.controllers.traffic import parse_target
from gate.db.models import ControllerKind
from gate.errors import InputMalformed


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
    target_file: Annotated[
        Path | None,
        typer.Option(
            "--target",
            help="k8s-traffic: a YAML or JSON file naming the objects specgate drives (an"
            " HTTPRoute and its two backends, or two LLMInferenceService members); a link.json"
            " of deploy/k8s/traffic/ works as it is.",
        ),
    ] = None,
    database_url: DatabaseOption = None,
) -> None:
    """Link a rollout to its controller; for Flagger, print a new hook token once."""
    settings = settings_with(database_url)
    target = _target(target_file) if target_file else None
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
            target=target,
        )
    if target:
        typer.echo(
            f"rollout {rollout_id} drives {target.kind} objects in {target.namespace} itself;"
            " the traffic job writes them every SPECGATE_TRAFFIC_INTERVAL_S"
        )
    else:
        typer.echo(
            f"rollout {rollout_id} linked to {kind.value}; held after {missed_polls} missed "
            f"check-ins of {poll_interval_s:.0f} s (counted from its first check-in)"
        )
    if token:
        typer.echo(f"hook token (shown once; store it in a Secret, never in git):\n{token}")
    for note in notes(target) if target else []:
        typer.echo(f"note: {note}")


def _target(path: Path) -> HttpRouteTarget | KServeTarget:
    raw = read_yaml(path, "the target file")
    if isinstance(raw, dict) and "target" in raw:
        raw = raw["target"]
    try:
        return parse_target(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InputMalformed(
            f"the target file {path} is not a traffic target: {problems}"
        ) from None
