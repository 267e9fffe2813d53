"""The gate's guardrails as people read them: the registry and a verdict's pooled cells.

The weekly report and /ui (`GET /v1/guardrails`) list the guardrails by iterating the
registry (`gate.stats.registry`), so a guardrail declared there shows up in both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from gate.db.enums import RolloutMode
from gate.db.models import Verdict
from gate.reports.headline.cells import format_estimate, format_interval
from gate.reports.headline.facts import Cell
from gate.stats.ids import ALL
from gate.stats.registry import Family, guardrails, metric_id

HEADERS = ["guardrail", "what it measures", "status", "estimate [interval]"]


class GuardrailInfo(BaseModel):
    """One declared guardrail."""

    id: str
    label: str
    source: str
    unit: str
    shadow: str | None
    canary: str | None
    harm: str
    scope: str
    kills: bool


def declared() -> list[GuardrailInfo]:
    """Return every declared guardrail, in declaration order."""
    return [
        GuardrailInfo(
            id=g.id, label=g.label, source=g.source.value, unit=g.unit.value,
            shadow=g.shadow.value if g.shadow else None,
            canary=g.canary.value if g.canary else None,
            harm=g.harm.value, scope=g.scope.value, kills=g.kills,
        )
        for g in guardrails()
    ]  # fmt: skip


def latest_rows(verdicts: Sequence[Verdict], mode: RolloutMode) -> list[list[str]]:
    """Return one row per pooled guardrail cell of the latest verdict, in registry order."""
    if not verdicts:
        return []
    latest = max(verdicts, key=lambda v: (v.created_at, v.id))
    pooled = [c for c in latest.estimates or [] if c.get("segment") == ALL]
    rows = []
    for g in guardrails():
        family = g.family(mode)
        if family is None or family is Family.COLLAPSE:
            continue
        for cell in pooled:
            metric = metric_id(str(cell["metric"]))
            owner = "eval" if metric.evaluator is not None else metric.guardrail
            if owner == g.id:
                rows.append([str(metric), g.label, str(cell["status"]), _interval(cell)])
    return rows


BAND_HEADERS = [
    "candidate load band",
    "pairs",
    "speedup [interval]",
    "candidate load",
    "baseline load",
    "gain proven",
]


def latest_bands(verdicts: Sequence[Verdict]) -> list[list[str]]:
    """Return the latest verdict's load bands: speedup (baseline / candidate) and loads."""
    if not verdicts:
        return []
    latest = max(verdicts, key=lambda v: (v.created_at, v.id))
    return [band_row(b) for b in latest.bands or []]


def band_row(band: dict[str, Any]) -> list[str]:
    """Return one load band as people read it: the speedup is 1 / the latency ratio."""
    ratio, lo, hi = band.get("ratio"), band.get("lower"), band.get("upper")

    def speed(v: float | None, none: str) -> str:
        return none if v is None or v <= 0 else f"{1 / v:.3g}"

    bounded = all(isinstance(v, int | float) and 0 < v < math.inf for v in (lo, hi))
    if ratio is None:
        speedup = "no data"
    elif not bounded:  # a band with too few pairs has no interval yet, not [0, inf]
        speedup = f"{speed(ratio, '?')} (too few pairs for an interval)"
    else:
        speedup = f"{speed(ratio, '?')} [{speed(hi, '0')}, {speed(lo, 'inf')}]"
    loads = [band.get("candidate_load"), band.get("baseline_load")]
    return [
        str(band["band"]),
        str(band.get("n", 0)),
        speedup,
        *("?" if v is None else f"{v:.1f}" for v in loads),
        "yes" if band.get("proven") else "no",
    ]


def _interval(cell: dict[str, Any]) -> str:
    # The headline's words and rounding: one number per fact on every surface.
    read = Cell.from_json(cell)
    if read.estimate is None:
        return "no data"
    return f"{format_estimate(read)} [{format_interval(read)}]"
