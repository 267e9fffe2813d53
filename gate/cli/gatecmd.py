"""`specgate gate replay | simulate`: backtest recorded pairs, print operating characteristics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from gate.cli.advise import advise_command
from gate.cli.common import read_input
from gate.cli.gatecheck import check
from gate.db.enums import RolloutMode
from gate.errors import ConfigError
from gate.stats.arms_replay import has_arms, replay_arms, to_json
from gate.stats.policy import Policy, load_policy, load_tolerance
from gate.stats.replay import ReplayResult, look_fields, read_pairs, replay
from gate.stats.rule import Code
from gate.stats.sequences import FloatArray
from gate.stats.simulate import Outcomes, run_scenario
from gate.stats.simulated_pairs import Scenario

app = typer.Typer(help="Replay and simulate the statistical gate.", no_args_is_help=True)

# The scenarios of the simulation tests (tests/gate/stats/test_simulation.py).
SCENARIOS: dict[str, tuple[Scenario, int]] = {
    "aa": (Scenario("A/A", pairs=20_000, every=10), 20_000),
    "gain": (Scenario("TPOT -20%", pairs=3000, every=10, tpot_ratio=0.8), 3000),
    "boundary": (Scenario("TPOT -5% (boundary)", pairs=6000, every=10, tpot_ratio=0.95), 6000),
    "drop5": (Scenario("eval -5 points", pairs=3000, every=10, eval_drops=(0.05, 0.0)), 3000),
    "drop3": (Scenario("eval -3 points", pairs=10_000, every=50, eval_drops=(0.03, 0.0)), 10_000),
    "tail": (Scenario("TTFT tail +2 s on 3%", pairs=10_000, every=50, tail_share=0.03), 10_000),
    "collapse": (Scenario("acceptance collapse", pairs=3000, every=10, collapse_at=1500), 3000),
    # Sampled-output parity with the engine's real verifiers (the policy's parity guardrail
    # is switched on for these two).
    "parity-exact": (Scenario("sampled parity, exact verifier", pairs=5000, sampler="exact"), 5000),
    "parity-biased": (
        Scenario("sampled parity, biased-argmax verifier", pairs=3000, sampler="biased"),
        3000,
    ),
}


def with_parity(policy: Policy) -> Policy:
    """Return `policy` with the sampled-output parity guardrail enabled."""
    parity = policy.guardrails.output_parity.model_copy(update={"enabled": True})
    guardrails = policy.guardrails.model_copy(update={"output_parity": parity})
    return policy.model_copy(update={"guardrails": guardrails})


STAGE_HELP = "The stage (0-based) the pairs belong to: it spends alpha_kill / len(stages)."


def _open_share(value: float) -> float:
    if not 0.0 < value < 1.0:
        raise typer.BadParameter(f"{value:g} is not strictly between 0 and 1")
    return value


def _policy(path: Path | None) -> Policy:
    return Policy() if path is None else load_policy(read_input(path, "policy"))


@app.command("replay")
def replay_command(
    pairs: Annotated[Path, typer.Option("--pairs", help="Pair JSONL (see gate.stats.replay).")],
    policy: Annotated[
        Path | None, typer.Option("--policy", help="Policy YAML (default: the defaults).")
    ] = None,
    every: Annotated[int, typer.Option("--every", min=1, help="Look every N pairs.")] = 100,
    mode: Annotated[RolloutMode, typer.Option("--mode")] = RolloutMode.SHADOW,
    candidate_share: Annotated[
        float,
        typer.Option(
            "--candidate-share",
            callback=_open_share,
            help="Canary: the candidate's share, strictly between 0 and 1.",
        ),
    ] = 0.5,
    stage: Annotated[int, typer.Option("--stage", min=0, help=STAGE_HELP)] = 0,
    promoted: Annotated[
        bool,
        typer.Option(
            "--promoted",
            help="Judge as a promoted rollout: with promotion.route_by_load, only the"
            " load-matched pairs (promotion.load_match).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Backtest recorded pairs: the first decisive verdict and the pair count it came at.

    Pairs that name their arm (`arm`) are judged arm by arm, and the best arm is chosen."""
    judged = _policy(policy)
    records = read_pairs(pairs)
    if has_arms(records):
        _replay_arms(records, judged, every, mode, stage, promoted=promoted, as_json=as_json)
        return
    result = replay(
        records,
        judged,
        every=every,
        mode=mode,
        candidate_share=candidate_share,
        stage=stage,
        load_match=load_tolerance(judged, promoted=promoted),
    )
    if as_json:
        typer.echo(json.dumps(_replay_json(result), indent=2))
        return
    console = Console()
    console.print(result.verdict.summary)
    table = Table("metric", "segment", "estimate", "interval", "n", "status")
    for cell in result.verdict.cells:
        est = "-" if cell.estimate is None else f"{cell.estimate:.4f}"
        table.add_row(
            cell.metric, cell.segment, est, f"[{cell.lower:.4f}, {cell.upper:.4f}]",
            str(cell.n), cell.status,
        )  # fmt: skip
    console.print(table)
    where = "first decisive verdict" if result.decisive else "no decision; last look"
    console.print(
        f"{result.decision.value} at pair {result.pairs:,} ({where}, look {result.looks})"
    )


def _replay_arms(
    records: list[dict[str, Any]],
    policy: Policy,
    every: int,
    mode: RolloutMode,
    stage: int,
    *,
    promoted: bool,
    as_json: bool,
) -> None:
    """Replay several arms' pairs and print the choice (shadow mode only)."""
    if mode is not RolloutMode.SHADOW:
        raise ConfigError("pairs of several arms are replayed in shadow mode only")
    result = replay_arms(
        records, policy, every=every, stage=stage,
        load_match=load_tolerance(policy, promoted=promoted),
    )  # fmt: skip
    if as_json:
        typer.echo(json.dumps(to_json(result), indent=2))
        return
    table = Table("arm", "state", "decision", "pairs", "ratio", "interval", "reasons")
    for arm in result.arms:
        ratio = "-" if arm.ratio is None else f"{arm.ratio:.4f}"
        reasons = ", ".join(arm.verdict.reason_codes) if arm.verdict else "-"
        table.add_row(
            arm.name, arm.state.name.lower(), arm.decision.value, str(arm.pairs), ratio,
            f"[{arm.lower:.4f}, {arm.upper:.4f}]", reasons,
        )  # fmt: skip
    console = Console()
    console.print(table)
    where = "first decisive look" if result.decisive else "no decision; last look"
    console.print(
        f"{result.decision.value} at pair {result.pairs:,} ({where}, look {result.looks});"
        f" winner {result.winner or '-'}, leader {result.leader or '-'}"
    )


def _replay_json(result: ReplayResult) -> dict[str, Any]:
    return {
        **look_fields(result),
        "reason_codes": list(result.verdict.reason_codes),
        "summary": result.verdict.summary,
        "estimates": result.verdict.estimates(),
        # Per band of the candidate's load, as the verdicts API shows them (`bands`).
        "bands": result.verdict.band_rows(),
    }


@app.command("simulate")
def simulate_command(
    scenario: Annotated[
        list[str] | None, typer.Option("--scenario", help=f"One of {', '.join(SCENARIOS)}.")
    ] = None,
    runs: Annotated[int, typer.Option("--runs", min=1)] = 400,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    policy: Annotated[Path | None, typer.Option("--policy")] = None,
    kayenta_every: Annotated[
        int,
        typer.Option("--kayenta-every", min=0, help="A/A only: Kayenta judge looks (0: off)."),
    ] = 100,
    stage: Annotated[int, typer.Option("--stage", min=0, help=STAGE_HELP)] = 0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print the gate's operating characteristics by seeded simulation (one stage per run)."""
    names = scenario or list(SCENARIOS)
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise ConfigError(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}")
    rows = []
    for name in names:
        spec, within = SCENARIOS[name]
        judge = kayenta_every if name == "aa" and kayenta_every > 0 else None
        chosen = _policy(policy)
        if spec.sampler is not None:
            chosen = with_parity(chosen)
        out = run_scenario(spec, chosen, runs=runs, seed=seed, kayenta_every=judge, stage=stage)
        rows.append(_oc_row(name, out, within))
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table("scenario", "runs", "within", "kill", "promote", "hold", "Kayenta fail")
    for row in rows:
        rates = [_fmt(row[k]) for k in ("kill", "promote", "hold")]
        verdicts = " / ".join(f"{k} {_fmt(v)}" for k, v in row["kayenta"].items()) or "-"
        table.add_row(row["label"], str(row["runs"]), f"{row['within']:,}", *rates, verdicts)
    Console().print(table)
    typer.echo("Rates with 95% Clopper-Pearson intervals; Kayenta: MW at 98%, every look.")


def _oc_row(name: str, out: Outcomes, within: int) -> dict[str, Any]:
    codes = {"kill": Code.KILL, "promote": Code.PROMOTE, "hold": Code.HOLD}
    return {
        "scenario": name,
        "label": out.scenario.name,
        "runs": out.runs,
        "within": within,
        **{k: list(out.rate(code, within)) for k, code in codes.items()},
        "median_pairs_to_decision": _median(out.pairs_at),
        "kayenta": {k: list(out.kayenta_rate(k)) for k in out.kayenta},
        "kill_reasons": out.kill_reasons,
    }


def _median(pairs: FloatArray) -> float | None:
    decided = pairs[np.isfinite(pairs)]
    return float(np.median(decided)) if decided.size else None


def _fmt(rate: list[float]) -> str:
    return f"{rate[0]:.3f} [{rate[1]:.3f}, {rate[2]:.3f}]"


app.command("check")(check)
app.command("advise")(advise_command)
