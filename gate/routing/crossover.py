"""The crossover a promoted rollout routes by: per segment, the candidate's running
requests below which speculation was proven to pay, read with the routing snapshot.

The source is the rollout's recorded rehearsal (`specgate rehearse`, `rehearsals`): a
segment's crossover is the lower end of its interval, the highest swept concurrency
where the candidate was proven to win (0 when no level was: never speculate). A request
joins the candidate's running requests, so "below C running" means "at most C
concurrent", the level that was proven. Past the sweep nothing was measured, so a
segment that won at every level stops at the highest one swept.

The live load bands (`guardrails.load_bands`) are not a source yet: their per-band gains
prove where the candidate wins, not where it loses, and the verdict that holds them is
recomputed per stage. A rehearsal it is, or none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from gate.db.models import EngineSample, Rehearsal
from gate.pairs.load import RUNNING
from gate.rehearse import repository
from gate.stats.ids import ALL

REHEARSAL = "rehearsal"
# What the gateway routes by when it has no crossover to trust (the baseline serves all).
STALE = "stale"
MISSING = "missing"


@dataclass(frozen=True)
class SegmentCrossover:
    """One segment's crossover: the level routed by, and the interval it came from."""

    level: int
    low: int | None
    high: int | None
    text: str


@dataclass(frozen=True)
class Crossover:
    """A rollout's crossovers per segment (`all` always present), where they came from
    and when they were measured (Unix time)."""

    segments: Mapping[str, SegmentCrossover]
    source: str
    measured_at: float

    def of(self, segment: str) -> SegmentCrossover:
        """Return the crossover of `segment`, else the one of all traffic."""
        return self.segments.get(segment) or self.segments[ALL]


@dataclass(frozen=True)
class Running:
    """A route's running requests as the engine last reported them (summed over its
    processes), and when (Unix time)."""

    value: float
    at: float


@dataclass(frozen=True)
class ByLoad:
    """A promoted rollout that speculates only below the crossover (`promotion`)."""

    hysteresis: int
    max_age_s: float
    crossover: Crossover | None = None
    # The candidate engine's running requests at the snapshot's read (None: no scrape).
    running: Running | None = field(default=None, compare=False)

    def stale(self, now: float) -> bool:
        """Whether the crossover is missing or older than the policy allows."""
        return self.crossover is None or now - self.crossover.measured_at > self.max_age_s

    def effective(self, now: float) -> tuple[str, dict[str, int]]:
        """Return what requests are routed by now: the source (the crossover's, or
        `stale` and `missing` when the baseline serves everything) and each segment's
        crossover (0: never the candidate)."""
        if self.crossover is None:
            return MISSING, {ALL: 0}
        levels = {name: seg.level for name, seg in self.crossover.segments.items()}
        if self.stale(now):
            return STALE, dict.fromkeys(levels, 0)
        return self.crossover.source, levels


def from_rehearsal(row: Rehearsal) -> Crossover | None:
    """Return the crossover a recorded rehearsal measured (None: it names none)."""
    found = row.summary.get("crossover")
    if not isinstance(found, dict) or ALL not in found:
        return None
    segments = {name: _segment(value) for name, value in found.items() if isinstance(value, dict)}
    measured = row.run_at or row.recorded_at
    return Crossover(segments=segments, source=REHEARSAL, measured_at=measured.timestamp())


def _segment(value: Mapping[str, object]) -> SegmentCrossover:
    low, high = value.get("low"), value.get("high")
    low = low if isinstance(low, int) else None
    high = high if isinstance(high, int) else None
    return SegmentCrossover(level=low or 0, low=low, high=high, text=str(value.get("text", "")))


def crossovers(session: Session, rollout_ids: list[int]) -> dict[int, Crossover]:
    """Return the crossovers of these rollouts' recorded rehearsals, by rollout id."""
    rows = repository.of_rollouts(session, rollout_ids) if rollout_ids else {}
    found = {rollout_id: from_rehearsal(row) for rollout_id, row in rows.items()}
    return {rollout_id: cross for rollout_id, cross in found.items() if cross is not None}


def running(session: Session, route_ids: list[int], *, since: datetime) -> dict[int, Running]:
    """Return each route's latest scraped running requests since `since`, summed over
    the engine's processes (each process's newest sample)."""
    if not route_ids:
        return {}
    sample = EngineSample
    statement = (
        select(sample.route_id, sample.labels, sample.value, sample.scraped_at)
        .where(
            EngineSample.route_id.in_(route_ids),
            EngineSample.metric == RUNNING,
            EngineSample.scraped_at >= since,
        )
        .order_by(EngineSample.scraped_at)
    )
    return _newest(session.execute(statement).all())


def _newest(rows: Iterable[Row[int, dict[str, str], float, datetime]]) -> dict[int, Running]:
    latest: dict[int, dict[str, tuple[float, datetime]]] = {}
    for route_id, labels, value, at in rows:  # ascending: later samples replace earlier
        latest.setdefault(route_id, {})[repr(sorted(labels.items()))] = (value, at)
    return {
        route_id: Running(
            value=sum(v for v, _ in by.values()),
            at=min(at for _, at in by.values()).timestamp(),
        )
        for route_id, by in latest.items()
    }


def freshness_window(scrape_interval_s: float) -> timedelta:
    """Return how old a scrape may be and still count as the engine's current load."""
    return timedelta(seconds=2 * scrape_interval_s)
