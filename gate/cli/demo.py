"""`specgate demo`: the whole loop on local engines, on the embedded default."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gate.cli.common import DatabaseOption, settings_with
from gate.db.models import Verdict
from gate.demo.recording import RecordingReplay, replay_recording
from gate.demo.run import FAULTS, DemoOptions, DemoResult, run_demo
from gate.demo.summary import SegmentRow
from gate.reports import headline
from gate.stats.policy_sections import Arms


def demo(
    requests: Annotated[
        int,
        typer.Option(
            min=1,
            help="How many workload requests to replay (past the built-in 86, they are "
            "replayed again in turn).",
        ),
    ] = 80,
    backend: Annotated[
        str,
        typer.Option(
            help="llamacpp (default) or transformers (the default with --sampled or --fault)."
        ),
    ] = "",
    num_speculative_tokens: Annotated[int, typer.Option(min=1, max=32)] = 8,
    parallel: Annotated[
        int,
        typer.Option(
            min=1, help="llamacpp: requests each engine decodes at once (llama.cpp slots)."
        ),
    ] = 1,
    weights: Annotated[
        str,
        typer.Option(
            help="Both engines' weights: q8_0 (llamacpp default; re-encoded once from the "
            "shipped Q4_1) or q4_1 (as shipped; transformers default)."
        ),
    ] = "",
    sampled: Annotated[
        bool,
        typer.Option(
            "--sampled",
            help="Test sampled-output parity: replay copy-heavy proofreading prompts at "
            "temperature 0.8, unseeded and not streamed, with token log-probabilities asked "
            "from both routes and the parity guardrail on (transformers backend). An exact "
            "sampler passes it.",
        ),
    ] = False,
    fault: Annotated[
        str,
        typer.Option(
            help="FAULT INJECTION (implies --sampled): 'biased-sampler' runs the candidate "
            "with the wrong verifier --verify biased-argmax (a draft is accepted when it is "
            "the target's argmax), to watch the gate kill it.",
        ),
    ] = "",
    warmup_pairs: Annotated[
        int,
        typer.Option(
            min=30, help="--sampled: warm-up pairs, which fix the scale of the parity test."
        ),
    ] = 50,
    arms: Annotated[
        str,
        typer.Option(
            help="Several n-gram arms against plain in one rollout (issue 40): their draft "
            "lengths, comma-separated, e.g. '2,4,8' (one llama.cpp engine each; each request "
            "is mirrored to one arm). The gate judges each arm and chooses the best; each "
            "arm's /metrics is saved for `specgate gate advise --metrics FILE`.",
        ),
    ] = "",
    engine_timeout: Annotated[
        float,
        typer.Option(
            min=1.0, help="Seconds each engine may take to load (a busy host needs more)."
        ),
    ] = 180.0,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="End with one JSON document (per-segment rows, headline, reason codes, "
            "guardrail x segment grid) instead of the tables.",
        ),
    ] = False,
    database_url: DatabaseOption = None,
) -> None:
    """Run a plain and an n-gram speculative SmolLM2 engine, the gateway in shadow mode,
    the collectors, evaluators and the gate on SQLite; replay the built-in workload and
    print per-segment results and the verdict."""
    console = Console(width=min(Console().width, WIDTH))
    backend = _backend(backend, sampled=sampled, fault=fault)
    draft_lengths = _arms(arms, backend=backend, sampled=sampled or bool(fault))
    settings = settings_with(database_url).model_copy(
        update={"otlp_endpoint": None, "redis_url": None}
    )
    options = DemoOptions(
        requests=requests,
        backend=backend,
        num_speculative_tokens=num_speculative_tokens,
        parallel=parallel,
        weights=weights or None,
        sampled=sampled,
        fault=fault or None,
        warmup_pairs=warmup_pairs,
        arms=draft_lengths,
        engine_timeout_s=engine_timeout,
    )
    try:
        result = run_demo(settings, options, console)
    except KeyboardInterrupt:
        print(
            "\nspecgate demo: interrupted; every process it started was stopped.", file=sys.stderr
        )
        raise typer.Exit(130) from None
    # The live run is too short for a decision: end on a recording the gate decides on.
    # (A recording of one candidate says nothing about arms: a run with arms ends on its own.)
    recording = None if options.parity or options.arms else replay_recording()
    if as_json:
        typer.echo(json.dumps(as_document(result, recording)))
        return
    show(result, console, recording)


def _backend(backend: str, *, sampled: bool, fault: str) -> str:
    """Return the backend to run, checking the sampled-parity options against it."""
    if fault and fault not in FAULTS:
        raise typer.BadParameter(f"must be one of {', '.join(FAULTS)}", param_hint="--fault")
    if not (sampled or fault):
        return backend or "llamacpp"
    if backend not in ("", "transformers"):
        # The fault lives in the transformers backend's verifier, and only it returns a
        # log-probability for every token of a speculative answer.
        raise typer.BadParameter(
            "--sampled and --fault run on transformers only", param_hint="--backend"
        )
    return "transformers"


def _arms(value: str, *, backend: str, sampled: bool) -> tuple[int, ...]:
    """Return the arms' draft lengths from `--arms` (empty: one candidate)."""
    if not value:
        return ()
    try:
        lengths = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise typer.BadParameter("give draft lengths such as 2,4,8", param_hint="--arms") from None
    if len(set(lengths)) != len(lengths) or not all(1 <= k <= 32 for k in lengths):
        raise typer.BadParameter("distinct draft lengths in 1..32", param_hint="--arms")
    if len(lengths) > MAX_DEMO_ARMS:
        raise typer.BadParameter(f"at most {MAX_DEMO_ARMS} arms", param_hint="--arms")
    if sampled or backend != "llamacpp":
        raise typer.BadParameter("arms run on the llamacpp backend only, without --sampled "
                                 "or --fault", param_hint="--arms")  # fmt: skip
    return lengths


# The demo policy's `arms.slots` (the default): each arm's gate spends a fixed share.
MAX_DEMO_ARMS = Arms().slots


def as_document(result: DemoResult, recording: RecordingReplay | None = None) -> dict[str, Any]:
    """Return everything the demo shows, JSON-ready (NaN as null)."""
    return {
        "recording": asdict(recording) if recording else None,
        "rollout_id": result.rollout_id,
        "rows": [_finite(asdict(row)) for row in result.rows],
        "decision": result.verdict.decision.value,
        "reason_codes": list(result.verdict.reason_codes),
        "glance": result.glance.model_dump(mode="json") if result.glance else None,
        "parity": _parity_document(result),
        "report_dir": str(result.report_dir) if result.report_dir else None,
    }


def _parity_document(result: DemoResult) -> dict[str, Any] | None:
    if result.parity is None:
        return None
    document: dict[str, Any] = _finite(
        {**asdict(result.parity), "cells": parity_cells(result.verdict)}
    )
    return document


def parity_cells(verdict: Verdict) -> list[dict[str, Any]]:
    """Return the verdict's sampled-output parity cells (metric `parity:<statistic>`)."""
    return [c for c in verdict.estimates or [] if str(c.get("metric", "")).startswith("parity:")]


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 1000:.0f}"


# A terminal the output must fit without cutting a cell (`--requests 20` is checked at it).
WIDTH = 100


def show(result: DemoResult, console: Console, recording: RecordingReplay | None = None) -> None:
    """Print the latency and quality tables, where the report is, the headline, then the
    recording's replayed decision."""
    _show_live(result, console)
    if recording is not None:
        console.print()
        console.print(recording.line(), markup=False, highlight=False)


def _show_live(result: DemoResult, console: Console) -> None:
    console.print(_latency_table(result))
    if any(row.pass_rates or row.parity is not None for row in result.rows):
        console.print(_quality_table(result))
    if result.parity is not None:
        console.print(_parity_table(result))
        for stat, shift in result.parity.shifts.items():
            console.print(
                f"d = candidate - baseline, {stat}, all {shift.n} eligible pairs: mean "
                f"{shift.mean:+.3f}, sd {shift.sd:.3f}, t {shift.t:+.1f}"
            )
    unjudged = next((row.not_evaluable for row in result.rows if row.segment == "all"), 0)
    if unjudged:
        console.print(f"{unjudged} evaluation(s) not evaluable, left out of the pass rates")
    console.print(f"every interval: specgate gate check --rollout {result.rollout_id}")
    if result.report_dir:
        console.print(f"report: {result.report_dir / 'report.html'}")
        console.print(f"        {result.report_dir / 'report.md'}")
    verdict = result.verdict
    if result.glance is None:
        console.print(f"\nverdict: {verdict.decision.value.upper()}: {verdict.summary}")
        return
    console.print()
    width = min(console.width, WIDTH)
    for line in headline.text_lines(result.glance.headline, width=width, prefix="verdict: "):
        console.print(line, markup=False, highlight=False, overflow="fold")


def _latency_table(result: DemoResult) -> Table:
    spec = "n-gram arms pooled (spec)" if result.arms else "n-gram speculative (spec)"
    table = Table(title=f"rollout {result.rollout_id}: plain (base) vs {spec}, p50/p99 in ms")
    for column in ("segment", "pairs", "TTFT base", "TTFT spec", "TPOT base", "TPOT spec",
                   "speedup", "accept"):  # fmt: skip
        table.add_column(column, justify="left" if column == "segment" else "right")
    for row in result.rows:
        table.add_row(*_cells(row), end_section=row.segment == "all")
    if any(row.burst for row in result.rows):
        table.caption = (
            "speedup '-': the answers reached the gateway in one burst (not streamed, or "
            "tool calls held back until complete), so there is no decode speed to compare"
        )
    return table


def _quality_table(result: DemoResult) -> Table:
    names = sorted({name for row in result.rows for name in row.pass_rates})
    table = Table(title="pass rate base/spec per evaluator; greedy parity")
    table.add_column("segment")
    for name in names:
        table.add_column(name.replace("_", " "), justify="right")
    table.add_column("parity", justify="right")
    for row in result.rows:
        rates = [row.pass_rates.get(name, {}) for name in names]
        table.add_row(
            row.segment,
            *(f"{_rate(by.get('baseline'))}/{_rate(by.get('candidate'))}" for by in rates),
            "-" if row.parity is None else f"{row.parity:.0%}",
            end_section=row.segment == "all",
        )
    return table


def _parity_table(result: DemoResult) -> Table:
    counts = result.parity
    assert counts is not None
    out = ", ".join(f"{n} {why}" for why, n in sorted(counts.excluded.items())) or "none"
    table = Table(
        title=f"sampled-output parity: {counts.eligible} of {counts.sampled} pairs eligible "
        f"({counts.with_logprobs} with logprobs); left out: {out}",
        caption="shift: candidate minus baseline, in sd of d (warm-up), tested after the "
        "warm-up; length and distinct_2 on every eligible pair, mean_logprob where both "
        "sides have complete log-probabilities",
    )
    for column in ("statistic", "segment", "pairs", "shift", "interval", "margin", "status"):
        table.add_column(column, justify="left" if column in ("statistic", "segment") else "right")
    for cell in parity_cells(result.verdict):
        estimate = cell.get("estimate")
        table.add_row(
            str(cell["metric"]).removeprefix("parity:"),
            str(cell["segment"]),
            str(cell["n"]),
            "-" if estimate is None else f"{estimate:+.2f}",
            _bounds(cell.get("lower"), cell.get("upper")),
            "-" if cell.get("margin") is None else f"{cell['margin']:.2f}",
            str(cell["status"]),
        )
    return table


def _bounds(lower: float | None, upper: float | None) -> str:
    """Return an interval as the table shows it; an unbounded side (too few pairs yet,
    stored as null) reads as such, never as a number."""
    if lower is None and upper is None:
        return "too few pairs"
    low = "-inf" if lower is None else f"{lower:+.2f}"
    high = "+inf" if upper is None else f"{upper:+.2f}"
    return f"[{low}, {high}]"


def _rate(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}"


def _cells(row: SegmentRow) -> list[str]:
    def pair(values: tuple[float, float]) -> str:
        return f"{_ms(values[0])}/{_ms(values[1])}"

    return [
        row.segment,
        str(row.pairs),
        pair(row.ttft["baseline"]),
        pair(row.ttft["candidate"]),
        pair(row.tpot["baseline"]),
        pair(row.tpot["candidate"]),
        "-" if row.speedup is None else f"{row.speedup:.2f}x",
        "-" if row.acceptance is None else f"{row.acceptance:.0%}",
    ]
