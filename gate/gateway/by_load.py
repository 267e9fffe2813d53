"""Speculate below the crossover: which route serves a promoted rollout's request now.

A request goes to the candidate (the speculative route) while the candidate's running
requests are below its segment's crossover C (`gate.routing.crossover`), else to the
baseline. The running requests are the larger of the engine's scraped gauge, when
fresh, and this replica's own in-flight calls to the route: the gauge counts every
replica's calls but lags a scrape behind, the in-flight count is exact but only this
replica's, so the larger is the nearer lower bound of the load now.

Hysteresis: speculation turns off once the running requests reach C and back on only
once they fall below max(1, C - h), h = `promotion.hysteresis` (1 by default). Within
that band each (rollout, segment) keeps its last state, so a load hovering at the
threshold does not alternate routes on every request.

A missing crossover, or one older than `promotion.crossover_max_age_s`, sends the request
to the baseline: the route the fleet served with before the rollout, whose latency
speculation was meant to beat, and which no stale measurement can make worse.

Only unsampled requests are routed by load. A sampled one (the rollout's `sample_rate`)
is served by the baseline and mirrored to the candidate, as in shadow mode: the gate
keeps judging on these pairs, whose two calls meet the same load, whatever this routing
did. A candidate call routed here falls back to the baseline when it fails before its
answer (`gate.gateway.proxy`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from gate.gateway.metrics import GatewayMetrics
from gate.rollouts.states import PrimaryTarget
from gate.routing.crossover import ByLoad
from gate.routing.snapshot import RUNNING_FRESH, RolloutRouting, RoutingSnapshot


class Why(StrEnum):
    """Why a request routed by load went where it went (the span's label)."""

    BELOW = "below_crossover"
    ABOVE = "above_crossover"
    STALE = "crossover_stale"
    MISSING = "crossover_missing"


@dataclass(frozen=True)
class Choice:
    """Where one request routed by load goes, why, and the numbers behind it."""

    speculate: bool
    why: Why
    crossover: int | None = None
    running: float | None = None


class LoadRouter:
    """Choose per request, keeping each (rollout, segment)'s state for the hysteresis."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._off: set[tuple[int, str]] = set()

    def choose(self, routing: RolloutRouting, segment: str, inflight: int) -> Choice:
        """Return where a request of `segment` goes, given this replica's in-flight
        calls to the candidate."""
        by_load = routing.by_load
        assert by_load is not None
        now = self._clock()
        if by_load.crossover is None:
            return Choice(speculate=False, why=Why.MISSING)
        if by_load.stale(now):
            return Choice(speculate=False, why=Why.STALE)
        level = by_load.crossover.of(segment).level
        load = running(by_load, inflight, now)
        on = self._switch((routing.rollout_id, segment), load, level, by_load.hysteresis)
        return Choice(
            speculate=on, why=Why.BELOW if on else Why.ABOVE, crossover=level, running=load
        )

    def _switch(self, key: tuple[int, str], load: float, level: int, hysteresis: int) -> bool:
        """Apply the hysteresis: off at `level`, back on below max(1, level - h)."""
        if key in self._off:
            if level > 0 and load < max(1, level - hysteresis):
                self._off.discard(key)
        elif load >= level:
            self._off.add(key)
        return key not in self._off


def running(by_load: ByLoad, inflight: int, now: float) -> float:
    """Return the candidate's running requests: the fresh gauge or the in-flight count,
    whichever is larger."""
    gauge = by_load.running
    if gauge is None or now - gauge.at > RUNNING_FRESH.total_seconds():
        return float(inflight)
    return max(gauge.value, float(inflight))


def export(metrics: GatewayMetrics, snapshot: RoutingSnapshot, now: float) -> None:
    """Set the crossover gauges of every rollout routed by load (the effective levels)."""
    metrics.crossover.clear()
    metrics.crossover_age.clear()
    for alias, routing in snapshot.by_alias.items():
        by_load = routing.by_load
        if by_load is None or routing.plan.primary is not PrimaryTarget.BY_LOAD:
            continue
        source, levels = by_load.effective(now)
        rollout = str(routing.rollout_id)
        for segment, level in levels.items():
            metrics.crossover.labels(rollout, alias, routing.candidate.name, segment, source).set(
                level
            )
        if by_load.crossover is not None:
            measured = by_load.crossover.measured_at
            metrics.crossover_age.labels(rollout, alias, source).set(measured)
