"""The crossover a promoted rollout routes by: per segment, the candidate's running
requests below which speculation was proven to pay, read with the routing snapshot.

Two sources, the more recent proven one routes (`newest_proven`):

- The rollout's recorded rehearsal (`specgate rehearse`, `rehearsals`): a segment's
  crossover is the lower end of its interval, the highest swept concurrency where the
  candidate was proven to win (0 when no level was: never speculate). A request joins the
  candidate's running requests, so "below C running" means "at most C concurrent", the
  level that was proven. Past the sweep nothing was measured, so a segment that won at
  every level stops at the highest one swept.
- The live load bands of the rollout's latest verdict (`verdicts.bands`,
  `gate.stats.verdict.band_results`): the mirrored pairs' latency ratio per band of the
  candidate's running requests at the pair's start, with its interval (alpha_promote).
  A band wins when its interval lies below 1 and loses when it lies above. The crossover
  is 1 + the mean running requests (rounded down) of the highest winning band, so a
  request goes to the candidate only when it starts at or below the load where the win
  was measured; its upper end is the mean load (rounded up) of the first losing band
  above. The bands pool every segment: this source has `all` only, and while it routes,
  every segment routes by it.

A rollout with several candidate arms (issue 40) routes by its promoted arm's crossover
only: the arm of that name in a several-arm rehearsal (`arms`, not the lead arm's curve at
the top of the document), and load bands only from a verdict whose choice shows that arm
(its winner, else its leader, else the first arm judged: a promoted arm its own gate
killed leads nothing, but its verdict shows its bands). While several arms are active no
arm is the candidate yet, so neither source routes; a rehearsal of one candidate, or one
without an arm of that name, is not the arm's. A rollout of one candidate that recorded a
several-arm rehearsal routes by the arm that ran its candidate route's URL, not by the lead
arm's curve (none ran it: the rehearsal is not its).

A source is proven when its `all` interval has an end (some level or band proven to win
or to lose). The bands are a source only when proven; a rehearsal that proved nothing
still routes (its crossover 0: the baseline serves) when no band proves anything.
As `decide` does, both assume the gain does not grow with load.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, and_, func, select
from sqlalchemy.orm import Session

from gate.db.enums import ArmState
from gate.db.models import EngineSample, Rehearsal, Rollout, RolloutArm, Route, Verdict
from gate.pairs.load import RUNNING
from gate.rehearse import repository
from gate.stats.arms_replay import shown_in
from gate.stats.ids import ALL

REHEARSAL = "rehearsal"
LOAD_BANDS = "load_bands"
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

    @property
    def proven(self) -> bool:
        """Whether some level was proven to win or to lose (the interval has an end)."""
        return self.low is not None or self.high is not None


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


def from_rehearsal(
    row: Rehearsal, arm: str | None = None, *, candidate_url: str | None = None
) -> Crossover | None:
    """Return the crossover a recorded rehearsal measured (None: it names none): the
    candidate's (a several-arm rehearsal's lead arm's), or with `arm`, that arm's own (None
    when the rehearsal has no arm of that name); with `candidate_url` (a rollout of one
    candidate), a several-arm rehearsal's arm that ran that URL (None: no arm did)."""
    summary = row.summary
    if arm is not None:
        curve = _arm_curve(summary, lambda entry: entry.get("name") == arm)
    elif candidate_url is not None and isinstance(summary.get("arms"), list):
        curve = _arm_curve(summary, lambda entry: _same_url(entry.get("url"), candidate_url))
    else:
        curve = summary
    found = curve.get("crossover")
    if not isinstance(found, dict) or ALL not in found:
        return None
    top = _top_wins(curve.get("levels"))
    segments = {
        name: _segment(value, top.get(name))
        for name, value in found.items()
        if isinstance(value, dict)
    }
    measured = row.run_at or row.recorded_at
    return Crossover(segments=segments, source=REHEARSAL, measured_at=measured.timestamp())


def _arm_curve(
    summary: Mapping[str, Any], wanted: Callable[[Mapping[str, Any]], bool]
) -> Mapping[str, Any]:
    """Return the first `wanted` entry of a several-arm summary's `arms` (empty: none)."""
    arms = summary.get("arms")
    entries = arms if isinstance(arms, list) else []
    return next((a for a in entries if isinstance(a, dict) and wanted(a)), {})


def _same_url(url: object, other: str) -> bool:
    return isinstance(url, str) and url.rstrip("/") == other.rstrip("/")


def _top_wins(levels: object) -> dict[str, int]:
    """Return the segments that won at the highest level swept, with that level."""
    if not isinstance(levels, list) or not levels or not isinstance(levels[-1], dict):
        return {}
    top = levels[-1]
    at, segments = top.get("concurrency"), top.get("segments")
    if not isinstance(at, int) or not isinstance(segments, dict):
        return {}
    return {
        name: at
        for name, cell in segments.items()
        if isinstance(cell, dict) and cell.get("call") == "wins"
    }


def _segment(value: Mapping[str, object], top: int | None) -> SegmentCrossover:
    low, high = value.get("low"), value.get("high")
    low = low if isinstance(low, int) else top  # won at every level: the highest swept
    high = high if isinstance(high, int) else None
    return SegmentCrossover(level=low or 0, low=low, high=high, text=str(value.get("text", "")))


def from_bands(bands: Sequence[Mapping[str, Any]], at: datetime) -> Crossover | None:
    """Return the crossover a verdict's load bands prove (None: no band wins or loses).

    Args:
        bands: the verdict's bands, lowest load first (`ratio`, `lower`, `upper`: the
            candidate's latency over the baseline's; `candidate_load`: mean running
            requests on the candidate at the pairs' start).
        at: when the verdict was made.

    Returns:
        The crossover of segment `all`, source `load_bands`.
    """
    calls = [_band_call(band) for band in bands]
    # Only the wins below the first band proven to lose count: a win above a proven loss
    # must not send the loads in between to the candidate.
    lost = next((i for i, call in enumerate(calls) if call == "loses"), None)
    won = [i for i, call in enumerate(calls[:lost]) if call == "wins"]
    if not won and lost is None:
        return None
    low = math.floor(_load(bands[won[-1]])) + 1 if won else None
    high = math.ceil(_load(bands[lost])) if lost is not None else None
    if low is None:
        text = f"at or below {high} running requests (no band proven to win)"
    elif high is None:
        text = f"above {low} running requests; no band above proven to lose"
    else:
        text = f"between {low} and {high} running requests"
    segment = SegmentCrossover(level=low or 0, low=low, high=high, text=text)
    return Crossover(segments={ALL: segment}, source=LOAD_BANDS, measured_at=at.timestamp())


def _band_call(band: Mapping[str, Any]) -> str:
    lower, upper = band.get("lower"), band.get("upper")
    if not isinstance(band.get("candidate_load"), int | float):
        return "unclear"
    if isinstance(upper, int | float) and 0 < upper < 1:
        return "wins"
    return "loses" if isinstance(lower, int | float) and 1 < lower < math.inf else "unclear"


def _load(band: Mapping[str, Any]) -> float:
    return float(band["candidate_load"])


def newest_proven(*found: Crossover | None) -> Crossover | None:
    """Return the most recent crossover whose `all` is proven, else the first one given."""
    proven = [c for c in found if c is not None and c.of(ALL).proven]
    if proven:
        return max(proven, key=lambda c: c.measured_at)
    return next((c for c in found if c is not None), None)


def crossovers(session: Session, rollout_ids: list[int]) -> dict[int, Crossover]:
    """Return the crossover each of these rollouts routes by: its recorded rehearsal's
    or its latest verdict's load bands', the more recent proven one, by rollout id."""
    if not rollout_ids:
        return {}
    arms = _promoted_arms(session, rollout_ids)
    undecided = {r for r, arm in arms.items() if arm is None}  # several arms active
    urls = _candidate_urls(session, [r for r in rollout_ids if r not in arms])
    rehearsed = {
        rollout_id: from_rehearsal(row, arms.get(rollout_id), candidate_url=urls.get(rollout_id))
        for rollout_id, row in repository.of_rollouts(session, rollout_ids).items()
        if rollout_id not in undecided
    }
    live = {
        rollout_id: from_bands(bands, at)
        for rollout_id, bands, at, choice in _latest_bands(session, rollout_ids)
        if rollout_id not in undecided
        and (rollout_id not in arms or shown_in(choice) == arms[rollout_id])
    }
    found = {r: newest_proven(rehearsed.get(r), live.get(r)) for r in rollout_ids}
    return {rollout_id: cross for rollout_id, cross in found.items() if cross is not None}


def _promoted_arms(session: Session, rollout_ids: list[int]) -> dict[int, str | None]:
    """Return, for each of these rollouts that has arms, the arm it routes to: its one
    active arm (the promoted winner), None while several are active."""
    rows = session.execute(
        select(RolloutArm.rollout_id, RolloutArm.name, RolloutArm.state).where(
            RolloutArm.rollout_id.in_(rollout_ids)
        )
    ).all()
    active: dict[int, list[str]] = {}
    for rollout_id, name, state in rows:
        active.setdefault(rollout_id, [])
        if state is ArmState.ACTIVE:
            active[rollout_id].append(name)
    return {rollout_id: names[0] if len(names) == 1 else None for rollout_id, names in
            active.items()}  # fmt: skip


def _candidate_urls(session: Session, rollout_ids: list[int]) -> dict[int, str]:
    """Return the candidate route's URL of each of these rollouts (of one candidate)."""
    if not rollout_ids:
        return {}
    statement = (
        select(Rollout.id, Route.base_url)
        .join(Route, Route.id == Rollout.candidate_route_id)
        .where(Rollout.id.in_(rollout_ids))
    )
    return {rollout_id: url for rollout_id, url in session.execute(statement)}


def _latest_bands(
    session: Session, rollout_ids: list[int]
) -> Iterable[Row[int, list[dict[str, Any]], datetime, dict[str, Any] | None]]:
    """Return each rollout's latest verdict's load bands, when it was made, and its
    several-arm choice (None: one candidate)."""
    newest = (
        select(Verdict.rollout_id, func.max(Verdict.created_at).label("at"))
        .where(Verdict.rollout_id.in_(rollout_ids))
        .group_by(Verdict.rollout_id)
        .subquery()
    )
    joined = and_(Verdict.rollout_id == newest.c.rollout_id, Verdict.created_at == newest.c.at)
    return session.execute(
        select(Verdict.rollout_id, Verdict.bands, Verdict.created_at, Verdict.arms).join(
            newest, joined
        )
    ).all()


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
