"""The guardrail x segment grid: rows are guardrails, columns `all` and then the segments."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from gate.reports.headline.cells import (
    STATUS_COLOURS,
    STATUS_WORDS,
    cell_status,
    family,
    format_estimate,
    format_interval,
    format_value,
    label,
    ordered,
)
from gate.reports.headline.facts import Cell, Facts
from gate.stats.policy import ALL, Policy


class GridCell(BaseModel):
    """One metric x segment: estimate, interval, status, and the pairs behind it."""

    metric: str
    segment: str
    estimate: str
    interval: str
    status: str
    status_words: str
    colour: str
    n: int
    margin: str
    kill_at: str


class GridRow(BaseModel):
    metric: str
    label: str
    family: str
    cells: list[GridCell | None]


class Grid(BaseModel):
    """Rows: guardrails; columns: `all`, then the segments."""

    segments: list[str]
    rows: list[GridRow]


def grid(verdict: Any, *, policy: Policy) -> Grid:
    """Return the guardrail x segment grid of a stored verdict."""
    facts = Facts.of(verdict)
    segments = [ALL, *[s for s in policy.segments if any(c.segment == s for c in facts.cells)]]
    by_key = {(c.metric, c.segment): c for c in facts.cells}
    metrics = list(dict.fromkeys(c.metric for c in ordered(facts.cells)))
    rows = [
        GridRow(
            metric=m,
            label=label(m),
            family=family(m),
            cells=[_grid_cell(by_key.get((m, s)), policy) for s in segments],
        )
        for m in metrics
    ]
    return Grid(segments=segments, rows=rows)


def _grid_cell(cell: Cell | None, policy: Policy) -> GridCell | None:
    if cell is None:
        return None
    status = cell_status(cell, policy)

    def bound(value: float | None) -> str:
        return "" if value is None else format_value(cell.metric, value)

    return GridCell(
        metric=cell.metric,
        segment=cell.segment,
        estimate=format_estimate(cell),
        interval=format_interval(cell),
        status=status,
        status_words=STATUS_WORDS[status],
        colour=STATUS_COLOURS[status],
        n=cell.n,
        margin=bound(cell.margin),
        kill_at=bound(cell.kill_at),
    )
