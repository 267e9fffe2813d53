"""`specgate gate check`: the gate's verdict as an exit code, for deploy pipelines."""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gate.cli.common import DatabaseOption, cli_transaction, settings_with
from gate.db.enums import Decision, RolloutState
from gate.db.models import Verdict
from gate.errors import BadRequest, GateError, StaleVersion
from gate.rollouts import service as rollouts
from gate.routing.deployment import publisher
from gate.settings import Settings
from gate.verdicts.service import run_gate

EXIT_CODES = {Decision.PROMOTE: 0, Decision.KILL: 1, Decision.CONTINUE: 2, Decision.HOLD: 3}
# A rollout that is no longer running answers with what happened to it.
STATE_CODES = {
    RolloutState.PROMOTED: Decision.PROMOTE,
    RolloutState.KILLED: Decision.KILL,
    RolloutState.HELD: Decision.HOLD,
    RolloutState.PENDING: Decision.CONTINUE,
}
ERROR_EXIT = 4
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smh]?)$")


def parse_duration(text: str) -> float:
    """Parse '90', '90s', '30m' or '2h' into seconds."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise BadRequest(f"duration {text!r} is not like 90s, 30m or 2h")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def check(
    rollout: Annotated[int, typer.Option("--rollout", help="Rollout id.")],
    wait: Annotated[bool, typer.Option(help="Keep judging until a decision or --timeout.")] = False,
    timeout: Annotated[str, typer.Option(help="With --wait: give up after (30m, 2h...).")] = "30m",
    interval: Annotated[str, typer.Option(help="With --wait: time between looks.")] = "60s",
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")] = False,
    database_url: DatabaseOption = None,
) -> None:
    """Judge a rollout now. Exit 0 promote, 1 kill, 2 continue (or --wait timed out),
    3 hold, 4 error."""
    try:
        decision = _check(
            rollout, wait, parse_duration(timeout), parse_duration(interval), as_json, database_url
        )
    except GateError as exc:
        print(f"specgate gate check: error: {exc.message}", file=sys.stderr)
        raise typer.Exit(ERROR_EXIT) from None
    except Exception as exc:  # the pipeline must see 4, never a traceback's 1
        print(f"specgate gate check: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        raise typer.Exit(ERROR_EXIT) from None
    raise typer.Exit(EXIT_CODES[decision])


def _check(
    rollout_id: int,
    wait: bool,
    timeout_s: float,
    interval_s: float,
    as_json: bool,
    database_url: str | None,
) -> Decision:
    settings = settings_with(database_url)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            decision = _look(settings, rollout_id, as_json)
        except StaleVersion:
            # The periodic gate (or an operator) moved the rollout at the same moment:
            # answer with what it is now.
            decision = _look(settings, rollout_id, as_json, judge=False)
        if decision is not Decision.CONTINUE or not wait or time.monotonic() >= deadline:
            return decision
        time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))


def _look(settings: Settings, rollout_id: int, as_json: bool, *, judge: bool = True) -> Decision:
    """Judge a running rollout once, or report the state of one that is not running."""
    with cli_transaction(settings) as db:
        rollout = rollouts.get_rollout(db, rollout_id=rollout_id)
        if rollout.state is not RolloutState.RUNNING or not judge:
            decision = STATE_CODES.get(rollout.state, Decision.CONTINUE)
            _say(f"rollout {rollout_id} is {rollout.state.value}", None, as_json, decision)
            return decision
        verdict = run_gate(db, rollout_id=rollout_id, publisher=publisher(settings, db))
        _say(f"rollout {rollout_id} stage {verdict.stage}", verdict, as_json, verdict.decision)
        return verdict.decision


def _say(head: str, verdict: Verdict | None, as_json: bool, decision: Decision) -> None:
    if as_json:
        body: dict[str, Any] = {"decision": decision.value, "what": head}
        if verdict is not None:
            body.update(
                summary=verdict.summary,
                reasons=verdict.reason_codes,
                n_pairs=verdict.n_pairs,
                estimates=verdict.estimates,
            )
            if verdict.arms is not None:  # several candidates: the winner and each arm
                body.update(winner=verdict.arms.get("winner"), arms=verdict.arms)
        typer.echo(json.dumps(body, default=str))
        return
    console = Console()
    console.print(f"{head}: [bold]{decision.value.upper()}[/bold]")
    if verdict is None:
        return
    console.print(verdict.summary)
    table = Table("metric", "segment", "estimate", "interval", "n", "status")
    for cell in verdict.estimates:
        estimate = cell.get("estimate")
        shown = "-" if estimate is None else f"{estimate:.4f}"
        table.add_row(
            str(cell["metric"]),
            str(cell["segment"]),
            shown,
            f"[{_bound(cell.get('lower'))}, {_bound(cell.get('upper'))}]",
            str(cell["n"]),
            str(cell["status"]),
        )
    console.print(table)


def _bound(value: object) -> str:
    """Format an interval end; None stands for an unbounded one (no data yet)."""
    return f"{value:.4f}" if isinstance(value, int | float) else "-inf/inf"
