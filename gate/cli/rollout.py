"""`specgate rollout`: create, inspect and steer rollouts without the API."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from gate.cli.common import (
    DatabaseOption,
    cli_actor,
    cli_transaction,
    read_yaml,
    settings_with,
)
from gate.cli.controller import controller
from gate.db.enums import RolloutMode
from gate.db.models import Rollout
from gate.errors import Conflict, InputMalformed
from gate.reports import glance, headline
from gate.rollouts import repository, service
from gate.rollouts.exposure import exposure_of, percent
from gate.rollouts.schemas import ArmIn, RolloutIn
from gate.rollouts.states import Action
from gate.routing import service as routing
from gate.routing.deployment import publisher

app = typer.Typer(help="Create, inspect and steer rollouts.", no_args_is_help=True)
ReasonOption = Annotated[str, typer.Option("--reason", "-r", help="Why; kept in the audit trail.")]
app.command("controller")(controller)


@app.command()
def create(
    name: Annotated[str, typer.Option()],
    alias: Annotated[str, typer.Option(help="The model name clients ask for.")],
    baseline: Annotated[str, typer.Option(help="Baseline route name.")],
    candidate: Annotated[
        str | None, typer.Option(help="Candidate route name (or give --arm instead).")
    ] = None,
    arm: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME=ROUTE, once per arm, instead of --candidate: several candidate routes "
            "compared in one shadow rollout; each sampled request (and every request of its "
            "episode) is mirrored to one active arm, in equal shares. Pair records name the "
            "arm (`arm`).",
        ),
    ] = None,
    mode: Annotated[RolloutMode, typer.Option()] = RolloutMode.SHADOW,
    sample_rate: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Share of the alias's requests at the LAST stage. At each stage the candidate "
            "gets sample rate x the stage's percent (default stages 1, 5, 25, 100 %): 1.0 "
            "mirrors (shadow) or serves (canary) 1 % at the first stage; `rollout promote` "
            "moves to the next. `rollout show` states the share now and next.",
        ),
    ] = 0.1,
    policy: Annotated[
        Path | None,
        typer.Option(help="Policy YAML file (its `stages` set the ramp)."),
    ] = None,
    exists_ok: Annotated[
        bool,
        typer.Option(
            "--exists-ok",
            help="A rollout of this name and the same spec already there is reused, in "
            "whatever state it is (a re-run deploy job); a different one is still an error.",
        ),
    ] = False,
    database_url: DatabaseOption = None,
) -> None:
    """Create a pending rollout."""
    loaded = read_yaml(policy, "policy file") if policy else {}
    if not isinstance(loaded, dict):
        raise InputMalformed(f"policy file {policy} must hold a mapping")
    try:
        spec = RolloutIn(
            name=name,
            alias=alias,
            baseline_route=baseline,
            candidate_route=candidate,
            arms=[_arm(given) for given in arm] if arm else None,
            mode=mode,
            sample_rate=sample_rate,
            policy=loaded,
        )
    except ValidationError as exc:
        raise InputMalformed(_said(exc)) from None
    with cli_transaction(settings_with(database_url)) as db:
        existing = repository.get_rollout_by_name(db, name) if exists_ok else None
        if existing is not None:
            _same_rollout(existing, spec)
            line = f"rollout {existing.id} {existing.name} exists ({existing.state.value})"
        else:
            rollout = service.create_rollout(db, spec=spec, actor=cli_actor())
            line = f"rollout {rollout.id} {rollout.name} created (pending)"
    typer.echo(line)


def _arm(given: str) -> ArmIn:
    """Read one --arm NAME=ROUTE."""
    name, sep, route = given.partition("=")
    if not sep:
        raise InputMalformed(f"--arm {given!r}: give NAME=ROUTE, e.g. k4=ngram-k4")
    try:
        return ArmIn(name=name, route=route)
    except ValidationError as exc:
        raise InputMalformed(f"--arm {given!r}: {_said(exc)}") from None


def _said(exc: ValidationError) -> str:
    return "; ".join(str(error["msg"]).removeprefix("Value error, ") for error in exc.errors())


def _same_rollout(rollout: Rollout, spec: RolloutIn) -> None:
    """Refuse to reuse a rollout whose spec differs from the one asked for."""
    have = {
        "alias": rollout.alias,
        "baseline": rollout.baseline_route.name,
        "candidate": None if rollout.arms else rollout.candidate_route.name,
        "arms": [(a.name, a.route.name) for a in rollout.arms] or None,
        "mode": rollout.mode,
        "sample rate": rollout.sample_rate,
        "policy": rollout.policy,
    }
    wanted = {
        "alias": spec.alias,
        "baseline": spec.baseline_route,
        "candidate": spec.candidate_route,
        "arms": [(a.name, a.route) for a in spec.arms] if spec.arms else None,
        "mode": spec.mode,
        "sample rate": spec.sample_rate,
        "policy": spec.policy,
    }
    differs = [key for key in have if have[key] != wanted[key]]
    if differs:
        raise Conflict(f"rollout {rollout.name!r} already exists with another {', '.join(differs)}")


@app.command("list")
def list_rollouts(database_url: DatabaseOption = None) -> None:
    """List rollouts, newest first."""
    table = Table("id", "name", "alias", "mode", "state", "stage", "sample", "share", "version")
    with cli_transaction(settings_with(database_url)) as db:
        for r in repository.list_rollouts(db):
            table.add_row(
                str(r.id),
                r.name,
                r.alias,
                r.mode.value,
                r.state.value,
                str(r.stage),
                f"{r.sample_rate:g}",
                percent(exposure_of(r).share),
                str(r.version),
            )
    Console().print(table)


@app.command()
def show(
    rollout_id: int,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the rollout, the headline, the reason codes and the guardrail x "
            "segment grid as JSON.",
        ),
    ] = False,
    database_url: DatabaseOption = None,
) -> None:
    """Show one rollout and the answer at a glance of its newest verdict."""
    with cli_transaction(settings_with(database_url)) as db:
        rollout = service.get_rollout(db, rollout_id=rollout_id)
        change = repository.last_change(db, rollout.id)
        look = glance.latest(db, rollout=rollout)
        if as_json:
            body = {
                "id": rollout.id,
                "name": rollout.name,
                "state": rollout.state.value,
                "stage": rollout.stage,
                "exposure": exposure_of(rollout).describe(),
                "state_reason": change.reason if change else None,
                "glance": look.model_dump(mode="json"),
            }
            typer.echo(json.dumps(body))
            return
        why = f"\n  {rollout.state.value} by {change.actor}: {change.reason}" if change else ""
        # Fits a 100-column terminal: long lines wrap under their indent.
        for line in (_describe(rollout) + why).splitlines():
            typer.echo("\n".join(textwrap.wrap(line, width=100, subsequent_indent="    ")))
        typer.echo("\n".join(["", *headline.text_lines(look.headline, width=100)]))


def _describe(r: Rollout) -> str:
    arms = "".join(f"\n  arm {a.name}: {a.route.name} ({a.state.value})" for a in r.arms)
    return (
        f"rollout {r.id} {r.name}: alias={r.alias} mode={r.mode.value} state={r.state.value} "
        f"stage={r.stage} sample_rate={r.sample_rate:g} version={r.version}\n"
        f"  {exposure_of(r).describe()}{arms}"
    )


def _act(action: Action, rollout_id: int, reason: str, database_url: str | None) -> None:
    settings = settings_with(database_url)
    with cli_transaction(settings) as db:
        rollout = routing.change_state(
            db,
            rollout_id=rollout_id,
            action=action,
            actor=cli_actor(),
            reason=reason,
            publisher=publisher(settings, db),
        )
        line = _describe(rollout)
    typer.echo(line)


@app.command("add-arm")
def add_arm(
    rollout_id: int,
    name: Annotated[str, typer.Option(help="The arm's name, as pair records carry it.")],
    route: Annotated[str, typer.Option(help="Its candidate route.")],
    reason: ReasonOption,
    database_url: DatabaseOption = None,
) -> None:
    """Add an arm to a live rollout with arms: mirrored to from the next sampled request."""
    settings = settings_with(database_url)
    with cli_transaction(settings) as db:
        rollout = routing.add_arm(
            db,
            rollout_id=rollout_id,
            spec=ArmIn(name=name, route=route),
            actor=cli_actor(),
            reason=reason,
            publisher=publisher(settings, db),
        )
        line = _describe(rollout)
    typer.echo(line)


@app.command("kill-arm")
def kill_arm(
    rollout_id: int, name: str, reason: ReasonOption, database_url: DatabaseOption = None
) -> None:
    """Kill one arm: no more mirroring to it; the other arms go on."""
    settings = settings_with(database_url)
    with cli_transaction(settings) as db:
        rollout = routing.kill_arm(
            db,
            rollout_id=rollout_id,
            name=name,
            actor=cli_actor(),
            reason=reason,
            publisher=publisher(settings, db),
        )
        line = _describe(rollout)
    typer.echo(line)


@app.command()
def start(
    rollout_id: int, reason: ReasonOption = "started", database_url: DatabaseOption = None
) -> None:
    """Start a pending rollout."""
    _act(Action.START, rollout_id, reason, database_url)


@app.command()
def kill(rollout_id: int, reason: ReasonOption, database_url: DatabaseOption = None) -> None:
    """Kill a rollout: baseline only on every gateway."""
    _act(Action.KILL, rollout_id, reason, database_url)


@app.command()
def hold(rollout_id: int, reason: ReasonOption, database_url: DatabaseOption = None) -> None:
    """Hold a rollout: baseline only, data kept."""
    _act(Action.HOLD, rollout_id, reason, database_url)


@app.command()
def resume(rollout_id: int, reason: ReasonOption, database_url: DatabaseOption = None) -> None:
    """Resume a held or killed rollout."""
    _act(Action.RESUME, rollout_id, reason, database_url)


@app.command()
def promote(rollout_id: int, reason: ReasonOption, database_url: DatabaseOption = None) -> None:
    """Advance a stage, or promote on the last one (as the policy's `promotion` says)."""
    _act(Action.PROMOTE, rollout_id, reason, database_url)
