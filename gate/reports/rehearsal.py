"""A rollout's recorded rehearsal as the surfaces show it: words, a table and its curves.

The weekly report and /ui (through the glance) both read `view`, so they say the same
thing; the words come from `gate.reports.headline`.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from gate.db.models import Rehearsal
from gate.rehearse.schemas import RehearsalIn
from gate.reports import headline as words


class CurvePoint(BaseModel):
    """One level of one segment's curve (speedup None: too few answers there)."""

    concurrency: int
    speedup: float | None
    low: float | None
    high: float | None
    call: str


class Curve(BaseModel):
    """Speedup against concurrency in one segment, and where it stops paying."""

    segment: str
    points: list[CurvePoint]
    crossover: str


class RehearsalView(BaseModel):
    """The latest rehearsal recorded for a rollout."""

    run_at: datetime | None
    recorded_at: datetime
    recorded_by: str
    sentence: str
    # One line per segment's crossover, then the answer at the production concurrency.
    lines: list[str]
    at: int | None
    decision: str
    headers: list[str]
    rows: list[list[str]]
    curves: list[Curve]


def view(row: Rehearsal) -> RehearsalView:
    """Return the stored rehearsal as people read it."""
    summary = RehearsalIn.model_validate(row.summary)
    levels = [level.concurrency for level in summary.levels]
    curves = [_curve(summary, segment) for segment in summary.segments()]
    return RehearsalView(
        run_at=row.run_at,
        recorded_at=row.recorded_at,
        recorded_by=row.recorded_by,
        sentence=words.rehearsal_sentence(
            run_at=row.run_at,
            recorded_at=row.recorded_at,
            routes=(row.baseline_url, row.candidate_url),
            workload=row.workload,
            requests=row.requests,
            levels=levels,
        ),
        lines=[
            *(words.rehearsal_crossover(c.segment, c.crossover) for c in curves),
            words.rehearsal_answer(row.at, row.decision, levels[-1]),
        ],
        at=row.at,
        decision=row.decision,
        headers=words.REHEARSAL_HEADERS,
        rows=[_row(curve.segment, point) for curve in curves for point in curve.points],
        curves=curves,
    )


def _curve(summary: RehearsalIn, segment: str) -> Curve:
    points = []
    for level in summary.levels:
        cell = level.segments[segment]
        low, high = cell.interval if cell.interval else (None, None)
        points.append(
            CurvePoint(
                concurrency=level.concurrency, speedup=cell.speedup, low=low, high=high,
                call=words.call_words(cell.call),
            )
        )  # fmt: skip
    return Curve(segment=segment, points=points, crossover=summary.crossover[segment].text)


def _row(segment: str, point: CurvePoint) -> list[str]:
    interval = None if point.low is None or point.high is None else (point.low, point.high)
    return [
        segment,
        str(point.concurrency),
        words.rehearsal_speedup(point.speedup, interval),
        point.call,
    ]
