"""Each pair's load at its start: how many requests each route was serving then.

The engine's own gauge is preferred: the scraper's `requests_running` (vLLM's
`vllm:num_requests_running`, summed over the engine's processes), interpolated linearly
between the two scrapes around the pair's start when both lie within `max_gap_s` of it.
Without such scrapes the gateway's count stands in: the in-flight calls the pair's own
gateway replica had open to the route, plus, for every other replica, its latest count
recorded before the start within `max_gap_s` (each replica counts only its own calls).
Requests recorded before replicas were named count for their own replica only.

A pair's load is computed once, when it is stamped for the gate (`record`, called by
`gate.pairs.watermark.stamp_evaluated` once its evaluations landed), and stored with it.
What exists then: every scrape up to the stamp. The scrape before the pair's start is
there; the one after it is there unless the pair was stamped within a scrape interval
(`scrape_interval_s`) of its start, or the scraper lagged. Without it the engine gauge
cannot be interpolated and the gateway's counts stand in (`gateway`; `none` without a
recorded request). The stamped value is final: the fold sums it
(`gate.verdicts.aggregates`) and `specgate pairs export` writes it, so the gate and a replay
of the exported records read the same loads even where a later computation would find
the engine's scrape. Only pairs not stamped yet are computed when read (`loads_of`).
"""

from __future__ import annotations

import uuid
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, cast

from sqlalchemy import ColumnElement, select, update
from sqlalchemy.orm import Session

from gate.db.models import EngineSample, Pair, RequestRecord, Rollout
from gate.errors import NotFound

RUNNING = "requests_running"  # the scraper's canonical name of vllm:num_requests_running
Source = Literal["engine", "gateway", "none"]


@dataclass(frozen=True)
class Load:
    """One route's load at a pair's start, and where the number came from."""

    value: float | None
    source: Source


@dataclass(frozen=True)
class PairLoad:
    """A pair's start and the load of both routes then."""

    pair_id: uuid.UUID
    started_at: datetime
    baseline: Load
    candidate: Load


@dataclass(frozen=True)
class _Seen:
    """One recorded request: when, which replica, its in-flight counts per role."""

    at: datetime
    replica: str | None
    inflight: tuple[int, int]


def pair_loads(
    session: Session, *, rollout_id: int, stage: int | None = None, max_gap_s: float = 30.0
) -> list[PairLoad]:
    """Return each pair's load at its start, computed from what is stored now."""
    if session.get(Rollout, rollout_id) is None:
        raise NotFound(f"rollout {rollout_id} not found")
    where = [Pair.rollout_id == rollout_id]
    if stage is not None:
        where.append(Pair.stage == stage)
    return _computed(session, _pairs(session, where), max_gap_s)


def loads_of(
    session: Session, *, pair_ids: Sequence[uuid.UUID], max_gap_s: float = 30.0
) -> list[PairLoad]:
    """Return the given pairs' loads at their start (any rollouts), as `pair_loads` does."""
    if not pair_ids:
        return []
    return _computed(session, _pairs(session, [Pair.id.in_(pair_ids)]), max_gap_s)


def record(session: Session, *, pair_ids: Sequence[uuid.UUID]) -> None:
    """Store the pairs' loads and their sources (`Pair.baseline_load`, ...), once."""
    rows = [
        {
            "id": p.pair_id,
            "baseline_load": p.baseline.value,
            "candidate_load": p.candidate.value,
            "baseline_load_source": p.baseline.source,
            "candidate_load_source": p.candidate.source,
        }
        for p in loads_of(session, pair_ids=pair_ids)
    ]
    if rows:
        session.execute(update(Pair), rows)


def stamped(pair: Pair) -> PairLoad | None:
    """Return the load stamped with a pair (None: not stamped, or stamped before loads)."""
    if pair.baseline_load_source is None or pair.candidate_load_source is None:
        return None
    return PairLoad(
        pair.id,
        pair.created_at,
        Load(pair.baseline_load, cast(Source, pair.baseline_load_source)),
        Load(pair.candidate_load, cast(Source, pair.candidate_load_source)),
    )


def _computed(session: Session, rows: list[_Row], max_gap_s: float) -> list[PairLoad]:
    """Return the rows' loads, each rollout's scrapes and requests read once."""
    gap = timedelta(seconds=max_gap_s)
    per_rollout: dict[int, list[_Row]] = defaultdict(list)
    for row in rows:
        per_rollout[row.rollout_id].append(row)
    out = []
    for rollout_id, mine in per_rollout.items():
        rollout = session.get(Rollout, rollout_id)
        assert rollout is not None
        first, last = mine[0].start - gap, mine[-1].start + gap
        # A pair of an arm (issue 40) was answered by that arm's route.
        arms = {arm.name: arm.route_id for arm in rollout.arms}
        gauges: dict[int, list[tuple[datetime, float]]] = {}
        replicas = _replicas(session, rollout_id, first, last)
        for r in mine:
            routes = (rollout.baseline_route_id, arms.get(r.arm or "", rollout.candidate_route_id))
            for route_id in routes:
                if route_id not in gauges:
                    gauges[route_id] = _gauge(session, route_id, first, last)
            loads = (_load(gauges[routes[k]], replicas, r.start, r.seen, k, gap) for k in (0, 1))
            out.append(PairLoad(r.pair_id, r.start, *loads))
    return out


@dataclass(frozen=True)
class _Row:
    """A pair to compute the load of: its rollout, start and recorded request."""

    rollout_id: int
    pair_id: uuid.UUID
    start: datetime
    seen: _Seen | None
    arm: str | None = None


def _pairs(session: Session, where: list[ColumnElement[bool]]) -> list[_Row]:
    statement = (
        select(Pair.rollout_id, Pair.id, Pair.created_at, RequestRecord, Pair.arm)
        .outerjoin(RequestRecord, RequestRecord.id == Pair.request_id)
        .where(*where)
        .order_by(Pair.created_at, Pair.id)
    )
    return [
        _Row(rollout_id, pair_id, start, None if request is None else _seen(request), arm)
        for rollout_id, pair_id, start, request, arm in session.execute(statement)
    ]


def _seen(request: RequestRecord) -> _Seen:
    inflight = (request.inflight_baseline, request.inflight_candidate)
    return _Seen(request.created_at, request.gateway_replica, inflight)


def _gauge(
    session: Session, route_id: int, first: datetime, last: datetime
) -> list[tuple[datetime, float]]:
    """Return the route's running-requests gauge per scrape (summed over label sets)."""
    summed: dict[datetime, float] = defaultdict(float)
    for at, value in session.execute(
        select(EngineSample.scraped_at, EngineSample.value).where(
            EngineSample.route_id == route_id,
            EngineSample.metric == RUNNING,
            EngineSample.scraped_at.between(first, last),
        )
    ):
        summed[at] += value
    return sorted(summed.items())


def _replicas(
    session: Session, rollout_id: int, first: datetime, last: datetime
) -> dict[str, list[_Seen]]:
    """Return the rollout's named requests in the window, per replica, oldest first."""
    found: dict[str, list[_Seen]] = defaultdict(list)
    for request in session.scalars(
        select(RequestRecord)
        .where(
            RequestRecord.rollout_id == rollout_id,
            RequestRecord.gateway_replica.is_not(None),
            RequestRecord.created_at.between(first, last),
        )
        .order_by(RequestRecord.created_at)
    ):
        found[str(request.gateway_replica)].append(_seen(request))
    return found


def _load(
    gauge: list[tuple[datetime, float]],
    replicas: dict[str, list[_Seen]],
    start: datetime,
    own: _Seen | None,
    role: int,
    gap: timedelta,
) -> Load:
    engine = interpolate(gauge, start, gap)
    if engine is not None:
        return Load(engine, "engine")
    if own is None:
        return Load(None, "none")
    total = own.inflight[role]
    for replica, seen in replicas.items():
        if replica == own.replica:
            continue
        i = bisect_right([s.at for s in seen], start) - 1
        if i >= 0 and start - seen[i].at <= gap:
            total += seen[i].inflight[role]
    return Load(float(total), "gateway")


def interpolate(points: list[tuple[datetime, float]], at: datetime, gap: timedelta) -> float | None:
    """Interpolate a gauge linearly at `at` between the samples around it, both within `gap`."""
    i = bisect_right([t for t, _ in points], at)
    if i == 0:
        return None
    (t0, v0) = points[i - 1]
    if t0 == at:
        return v0
    if i == len(points) or at - t0 > gap or points[i][0] - at > gap:
        return None
    (t1, v1) = points[i]
    return v0 + (v1 - v0) * ((at - t0) / (t1 - t0))
