"""Typed values of the weekly report: what was measured, and what it found."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gate.errors import BadRequest
from gate.reports.intervals import Z95, Difference, Proportion

if TYPE_CHECKING:
    from gate.reports.glance import Glance
    from gate.reports.rehearsal import RehearsalView

# Quantile grid of the latency CDFs: 0.00, 0.01, ..., 1.00.
PROBS = tuple(i / 100 for i in range(101))
DECISIONS = ("continue", "hold", "promote", "kill")
_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")


@dataclass(frozen=True)
class Week:
    """An ISO week as a UTC interval [start, end)."""

    year: int
    number: int

    @classmethod
    def parse(cls, text: str) -> Week:
        """Parse `2026-W47`; raise BadRequest for anything else."""
        match = _WEEK.match(text.strip())
        if match is None:
            raise BadRequest(f"week {text!r} is not an ISO week like 2026-W47")
        year, number = int(match[1]), int(match[2])
        try:
            date.fromisocalendar(year, number, 1)
        except ValueError:
            raise BadRequest(f"{year} has no ISO week {number}") from None
        return cls(year, number)

    @classmethod
    def containing(cls, moment: datetime) -> Week:
        """Return the ISO week holding `moment` (UTC)."""
        iso = moment.astimezone(UTC).isocalendar()
        return cls(iso.year, iso.week)

    @property
    def start(self) -> datetime:
        """Return Monday 00:00 UTC."""
        monday = date.fromisocalendar(self.year, self.number, 1)
        return datetime.combine(monday, time(), tzinfo=UTC)

    @property
    def end(self) -> datetime:
        """Return the next Monday 00:00 UTC."""
        return self.start + timedelta(days=7)

    def previous(self) -> Week:
        """Return the week before."""
        return Week.containing(self.start - timedelta(days=1))

    def __str__(self) -> str:
        return f"{self.year}-W{self.number:02d}"


@dataclass(frozen=True)
class Distribution:
    """A latency distribution as its quantiles on `PROBS`."""

    n: int
    grid: tuple[float, ...]

    def at(self, p: float) -> float:
        """Return the p-quantile (p on the 0.01 grid)."""
        return self.grid[round(p * 100)]

    def interval(self, p: float, z: float = Z95) -> tuple[float, float]:
        """Return a distribution-free ~95% interval of the p-quantile (order-statistic ranks)."""
        half = z * math.sqrt(p * (1 - p) / self.n) if self.n else 1.0
        low, high = max(0.0, p - half), min(1.0, p + half)
        return float(np.interp(low, PROBS, self.grid)), float(np.interp(high, PROBS, self.grid))

    def brief(self) -> dict[str, float | int]:
        """Return n, p50, p90 and p99."""
        return {"n": self.n, "p50": self.at(0.5), "p90": self.at(0.9), "p99": self.at(0.99)}


@dataclass(frozen=True)
class Acceptance:
    segment: str
    calls: int
    draft_tokens: int
    accepted_tokens: int

    @property
    def rate(self) -> float | None:
        """Return accepted / draft tokens."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None


@dataclass(frozen=True)
class Quality:
    """One evaluator's pass rates per arm, and candidate minus baseline; results that were
    not evaluable are outside the rates and counted per arm."""

    evaluator: str
    baseline: Proportion
    candidate: Proportion
    delta: Difference | None
    not_evaluable: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Failures:
    """Route calls by outcome class: route failures (error or timeout, fallback) and calls
    no route is answerable for (dropped by the gateway's bounds, cancelled by the client)."""

    n: int
    errors: int
    fallbacks: int
    not_attributable: int

    @property
    def failed(self) -> int:
        """Return the route failures: they count in the failure guardrail."""
        return self.errors + self.fallbacks

    @property
    def attributable(self) -> int:
        """Return the calls a route is answerable for: the failure rate's denominator."""
        return self.n - self.not_attributable

    @property
    def rate(self) -> float | None:
        """Return route failures per attributable call."""
        return self.failed / self.attributable if self.attributable else None


@dataclass(frozen=True)
class RolloutStats:
    """One rollout over one week."""

    ttft: dict[str, Distribution]
    tpot: dict[str, Distribution]
    acceptance: dict[str, Acceptance]
    quality: list[Quality]
    failures: dict[str, Failures]
    # Median TTFT and TPOT (seconds) per segment and cohort: {segment: {cohort: SegmentLatency}}.
    segments: dict[str, dict[str, SegmentLatency]] = field(default_factory=dict)


@dataclass(frozen=True)
class SegmentLatency:
    """One segment and cohort: calls answered, and median TTFT and TPOT in seconds."""

    n: int
    ttft_p50: float | None
    tpot_p50: float | None


@dataclass(frozen=True)
class RolloutWeek:
    rollout_id: int
    name: str
    alias: str
    state: str
    current: RolloutStats
    previous: RolloutStats
    verdicts: dict[str, int]
    # How the task evaluator contained code; the report flags `unsafe-local`.
    sandbox: str | None = None
    # The answer at a glance of the week's newest verdict (None: never judged this week).
    glance: Glance | None = None

    def too_early(self) -> bool:
        """Whether the gate could not call this rollout yet for want of pairs."""
        head = self.glance.headline if self.glance else None
        return head is not None and head.decision == "continue" and head.pairs_needed is not None

    # The latest verdict's pooled cell per guardrail (`gate.reports.guardrails`).
    guardrails: list[list[str]] = field(default_factory=list)
    # The latest verdict's load bands: speedup and both routes' loads per band.
    bands: list[list[str]] = field(default_factory=list)
    # The rehearsal recorded for the rollout (`specgate rehearse --rollout`), if any.
    rehearsal: RehearsalView | None = None


@dataclass(frozen=True)
class Finding:
    """A guardrail the gate proved harmful or better, as the headline says it."""

    rollout: str
    metric: str
    # `all` (pooled over segments), or the segments it was proven in.
    segment: str
    text: str
    estimate: str
    interval: str
    # The pairs behind the test.
    n: int


@dataclass(frozen=True)
class Event:
    """A verdict or a kill during the week."""

    rollout: str
    what: str
    at: datetime
    actor: str
    reason: str


@dataclass
class WeeklyReport:
    week: Week
    rollouts: list[RolloutWeek]
    regressions: list[Finding]
    improvements: list[Finding]
    verdicts: list[Event]
    kills: list[Event]
    files: list[Path] = field(default_factory=list)
    report_id: int | None = None
    markdown: str = ""

    def summary(self) -> dict[str, Any]:
        """Return the report's numbers as JSON-ready values (stored with the row)."""
        counts: dict[str, int] = {}
        for event in self.verdicts:
            counts[event.what] = counts.get(event.what, 0) + 1
        return {
            "period": str(self.week),
            "previous_period": str(self.week.previous()),
            "start": self.week.start.isoformat(),
            "end": self.week.end.isoformat(),
            "regressions": [asdict(f) for f in self.regressions],
            "improvements": [asdict(f) for f in self.improvements],
            "kills": [_event(e) for e in self.kills],
            "verdicts": {"counts": counts, "events": [_event(e) for e in self.verdicts]},
            "rollouts": [_rollout(r) for r in self.rollouts],
            "not_enough_data": [r.name for r in self.rollouts if r.too_early()],
            "headlines": {r.name: r.glance.headline.sentence for r in self.rollouts if r.glance},
            "files": sorted(p.name for p in self.files),
        }


def _event(event: Event) -> dict[str, Any]:
    return {**asdict(event), "at": event.at.isoformat()}


def _stats(stats: RolloutStats) -> dict[str, Any]:
    return {
        "latency": {
            "ttft": {c: d.brief() for c, d in stats.ttft.items()},
            "tpot": {c: d.brief() for c, d in stats.tpot.items()},
        },
        "acceptance": {s: {**asdict(a), "rate": a.rate} for s, a in stats.acceptance.items()},
        "quality": {
            q.evaluator: {
                "baseline": {**asdict(q.baseline), "rate": q.baseline.rate},
                "candidate": {**asdict(q.candidate), "rate": q.candidate.rate},
                "delta": asdict(q.delta) if q.delta else None,
                "not_evaluable": q.not_evaluable,
            }
            for q in stats.quality
        },
        "failures": {
            c: {**asdict(f), "failed": f.failed, "rate": f.rate} for c, f in stats.failures.items()
        },
    }


def _rollout(week: RolloutWeek) -> dict[str, Any]:
    return {
        "id": week.rollout_id,
        "name": week.name,
        "alias": week.alias,
        "state": week.state,
        "verdicts": week.verdicts,
        "current": _stats(week.current),
        "previous": _stats(week.previous),
        "guardrails": week.guardrails,
        "bands": week.bands,
        "rehearsal": week.rehearsal.model_dump(mode="json") if week.rehearsal else None,
    }
