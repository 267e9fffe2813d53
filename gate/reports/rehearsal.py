"""A rollout's recorded rehearsal as the surfaces show it: words, a table and its curves.

The weekly report and /ui (through the glance) both read `view`, so they say the same
thing; the words come from `gate.reports.headline`.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from gate.db.models import Rehearsal
from gate.rehearse.analysis import ALL
from gate.rehearse.arms import cell_words
from gate.rehearse.schemas import ArmIn, BestCell, CrossoverIn, LevelIn, RehearsalIn
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


class RehearsalArm(BaseModel):
    """One candidate arm of a several-arm rehearsal, against the shared baseline."""

    name: str
    url: str
    # The arm the rehearsal's curve is (the best at --at, or at the top level swept).
    lead: bool
    # Exact (or not tested) and proven faster at --at on its own.
    pays: bool
    usable: bool
    # The exactness test's result in a word or two ("exact", "not exact: TV ..."), and in full.
    exactness: str
    exactness_detail: str
    # Its intervals' alpha (0.05 / K with K arms, Bonferroni) and that as a confidence.
    interval_alpha: float
    confidence: str
    # Segment `all`, per level swept, the intervals at `interval_alpha`, and in words.
    points: list[CurvePoint]
    speedups: list[str]
    crossover: str
    decision: str


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
    # The speedup intervals' confidence ("95 %"; with K arms, 1 - 0.05 / K).
    confidence: str
    headers: list[str]
    rows: list[list[str]]
    curves: list[Curve]
    # Several arms: the lead arm (the curve above), every arm, and the best arm per
    # segment and level in words; None and empty for one candidate.
    lead: str | None = None
    arms: list[RehearsalArm] = []
    # At what confidence the arms' intervals were drawn (`words.arms_note`); "" for one.
    arms_note: str = ""
    best: list[str] = []


def view(row: Rehearsal) -> RehearsalView:
    """Return the stored rehearsal as people read it."""
    summary = RehearsalIn.model_validate(row.summary)
    levels = [level.concurrency for level in summary.levels]
    curves = [_curve(summary.levels, summary.crossover, segment) for segment in summary.segments()]
    found = [_arm(summary, arm) for arm in summary.arms or ()]
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
            arms=[arm.name for arm in found],
            lead=summary.lead,
        ),
        lines=[
            *(words.rehearsal_crossover(c.segment, c.crossover) for c in curves),
            words.rehearsal_answer(row.at, row.decision, levels[-1]),
            *_arms_answer(row.at, found),
        ],
        at=row.at,
        decision=row.decision,
        confidence=words.confidence(summary.interval_alpha),
        headers=words.rehearsal_headers(summary.interval_alpha),
        rows=[_row(curve.segment, point) for curve in curves for point in curve.points],
        curves=curves,
        lead=summary.lead,
        arms=found,
        arms_note=words.arms_note([arm.interval_alpha for arm in found]) if found else "",
        best=[_best(segment, cells) for segment, cells in (summary.best or {}).items()],
    )


def _arm(summary: RehearsalIn, arm: ArmIn) -> RehearsalArm:
    # An arm written before arms carried their alpha was judged at the document's.
    alpha = arm.interval_alpha or summary.interval_alpha
    points = _curve(arm.levels, arm.crossover, ALL).points
    exactness, detail = words.arm_exactness(arm.exactness)
    return RehearsalArm(
        name=arm.name,
        url=arm.url,
        lead=arm.name == summary.lead,
        pays=arm.usable and arm.decision == "pays",
        usable=arm.usable,
        exactness=exactness,
        exactness_detail=detail,
        interval_alpha=alpha,
        confidence=words.confidence(alpha),
        points=points,
        speedups=[_speedup(point) for point in points],
        crossover=arm.crossover[ALL].text,
        decision=arm.decision,
    )


def _arms_answer(at: int | None, found: list[RehearsalArm]) -> list[str]:
    if not found:
        return []
    paying = [arm.name for arm in found if arm.pays]
    return [words.arms_answer(at, paying, [arm.name for arm in found if not arm.usable])]


def _best(segment: str, cells: list[BestCell]) -> str:
    name = "all segments" if segment == ALL else segment
    return f"Best arm, {name}: " + "; ".join(cell_words(c.model_dump()) for c in cells)


def _curve(levels: list[LevelIn], crossover: dict[str, CrossoverIn], segment: str) -> Curve:
    points = []
    for level in levels:
        cell = level.segments[segment]
        low, high = cell.interval if cell.interval else (None, None)
        points.append(
            CurvePoint(
                concurrency=level.concurrency, speedup=cell.speedup, low=low, high=high,
                call=words.call_words(cell.call),
            )
        )  # fmt: skip
    return Curve(segment=segment, points=points, crossover=crossover[segment].text)


def _row(segment: str, point: CurvePoint) -> list[str]:
    return [segment, str(point.concurrency), _speedup(point), point.call]


def _speedup(point: CurvePoint) -> str:
    interval = None if point.low is None or point.high is None else (point.low, point.high)
    return words.rehearsal_speedup(point.speedup, interval)
