"""`specgate gate advise`: recommend num_speculative_tokens from an engine's counters."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console
from rich.table import Table

from collectors import scraper
from gate.errors import BadRequest
from gate.stats.advisor import PositionAcceptance, advise

# The exposed names the advice reads: those the scraper maps to these canonical counters.
_READ = (scraper.SPEC_DRAFTS, scraper.SPEC_ACCEPTED_PER_POS)
EXPOSED = sorted(name for name, src in scraper.SOURCES.items() if src.canonical in _READ)


def position_acceptance(exposition: str) -> PositionAcceptance:
    """Sum the draft and per-position accepted counters over engines and models."""
    counters = scraper.parse(exposition).counters
    drafts = counters.get((scraper.SPEC_DRAFTS, ()), 0.0)
    by_position: dict[int, float] = defaultdict(float)
    for (name, labels), value in counters.items():
        if name == scraper.SPEC_ACCEPTED_PER_POS:
            by_position[int(dict(labels).get("position", "0"))] += value
    if drafts <= 0 or not by_position:
        raise BadRequest(
            f"no speculative counters ({', '.join(EXPOSED)}) in the exposition: is the "
            "engine speculating, and has it served requests?"
        )
    accepted = tuple(int(by_position[p]) for p in sorted(by_position))
    return PositionAcceptance(drafts=int(drafts), accepted=accepted)


def advise_command(
    metrics: Annotated[
        str, typer.Option("--metrics", help="An engine's /metrics URL or a saved scrape.")
    ],
    cost_ratio: Annotated[
        float, typer.Option(min=0.0, help="Draft pass time over target pass time (0 for n-gram).")
    ] = 0.0,
    verify_cost: Annotated[
        float, typer.Option(min=0.0, help="Extra target cost per verified token, in steps.")
    ] = 0.0,
    max_k: Annotated[int, typer.Option(min=1, max=64, help="Largest k considered.")] = 8,
) -> None:
    """Recommend num_speculative_tokens from per-position acceptance (vLLM counters)."""
    text = _read(metrics)
    advice = advise(
        position_acceptance(text), cost_ratio=cost_ratio, verify_cost=verify_cost, max_k=max_k
    )
    table = Table("k", "accepted per step", "tokens per step", "modelled speedup", "measured")
    for option in advice.options:
        table.add_row(
            str(option.k),
            f"{option.expected_accepted:.2f}",
            f"{option.tokens_per_step:.2f}",
            f"{option.speedup:.2f}x",
            "extrapolated" if option.extrapolated else "yes",
        )
    console = Console()
    console.print(table)
    console.print(advice.summary)


def _read(source: str) -> str:
    if source.startswith(("http://", "https://")):
        try:
            response = httpx.get(source, timeout=10)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise BadRequest(f"cannot read {source}: {exc}") from None
        return response.text
    path = Path(source)
    if not path.is_file():
        raise BadRequest(f"{source} is neither an http(s) URL nor a file")
    return path.read_text()
