"""`specgate demo`: the whole loop on local engines, on the embedded default."""

from __future__ import annotations

import math
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gate.cli.common import DatabaseOption, settings_with
from gate.demo.run import DemoOptions, DemoResult, run_demo
from gate.demo.summary import SegmentRow


def demo(
    requests: Annotated[
        int, typer.Option(min=1, help="How many workload requests to replay.")
    ] = 80,
    backend: Annotated[str, typer.Option(help="llamacpp (default) or transformers.")] = "llamacpp",
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
    database_url: DatabaseOption = None,
) -> None:
    """Run a plain and an n-gram speculative SmolLM2 engine, the gateway in shadow mode,
    the collectors, evaluators and the gate on SQLite; replay the built-in workload and
    print per-segment results and the verdict."""
    console = Console()
    settings = settings_with(database_url).model_copy(
        update={"otlp_endpoint": None, "redis_url": None}
    )
    options = DemoOptions(
        requests=requests,
        backend=backend,
        num_speculative_tokens=num_speculative_tokens,
        parallel=parallel,
        weights=weights or None,
    )
    try:
        result = run_demo(settings, options, console)
    except KeyboardInterrupt:
        print(
            "\nspecgate demo: interrupted; every process it started was stopped.", file=sys.stderr
        )
        raise typer.Exit(130) from None
    show(result, console)


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 1000:.0f}"


def show(result: DemoResult, console: Console) -> None:
    """Print the per-segment table, the verdict and where the report is."""
    table = Table(title=f"rollout {result.rollout_id}: plain (base) vs n-gram speculative (spec)")
    for column in (
        "segment",
        "pairs",
        "TTFT p50/p99 ms base",
        "spec",
        "TPOT p50/p99 ms base",
        "spec",
        "TPOT speedup",
        "acceptance",
        "pass rate base / spec",
        "greedy parity",
    ):
        table.add_column(column, justify="left" if column == "segment" else "right")
    for row in result.rows:
        table.add_row(*_cells(row), end_section=row.segment == "all")
    if any(row.burst for row in result.rows):
        table.caption = (
            "TPOT speedup '-': the answers reached the gateway in one burst "
            "(tool calls are held back until complete), so there is no decode speed to compare"
        )
    console.print(table)
    unjudged = next((row.not_evaluable for row in result.rows if row.segment == "all"), 0)
    if unjudged:
        console.print(f"{unjudged} evaluation(s) not evaluable, left out of the pass rates")
    verdict = result.verdict
    console.print(f"\n[bold]verdict: {verdict.decision.value.upper()}[/bold]")
    console.print(verdict.summary)
    console.print(f"every interval: specgate gate check --rollout {result.rollout_id}")
    if result.report_dir:
        console.print(
            f"\nreport: {result.report_dir / 'report.html'} and {result.report_dir / 'report.md'}"
        )


def _cells(row: SegmentRow) -> list[str]:
    def pair(values: tuple[float, float]) -> str:
        return f"{_ms(values[0])}/{_ms(values[1])}"

    rates = "; ".join(
        f"{name} {by.get('baseline', float('nan')):.2f}/{by.get('candidate', float('nan')):.2f}"
        for name, by in sorted(row.pass_rates.items())
    )
    return [
        row.segment,
        str(row.pairs),
        pair(row.ttft["baseline"]),
        pair(row.ttft["candidate"]),
        pair(row.tpot["baseline"]),
        pair(row.tpot["candidate"]),
        "-" if row.speedup is None else f"{row.speedup:.2f}x",
        "-" if row.acceptance is None else f"{row.acceptance:.0%}",
        rates or "-",
        "-" if row.parity is None else f"{row.parity:.0%}",
    ]
