"""What a promoted rollout routed by load routes by: its crossover per segment, its
source (the recorded rehearsal or the live load bands) and interval, read from the
database as the gateway reads it (`gate.routing.crossover`)."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel
from sqlalchemy.orm import Session

from gate.db.enums import RolloutState
from gate.db.models import Rollout
from gate.routing.crossover import ByLoad, crossovers
from gate.stats.policy import Policy


class SegmentView(BaseModel):
    """One segment: the crossover routed by (0: the baseline serves it) and its interval."""

    crossover: int
    low: int | None = None
    high: int | None = None
    text: str = ""


class CrossoverView(BaseModel):
    """A rollout routed by load (`promotion.route_by_load`): whether it does now, by
    which crossover, from where, measured when, and the hysteresis."""

    routing_by_load: bool
    source: str
    measured_at: datetime | None
    max_age_s: float
    hysteresis: int
    segments: dict[str, SegmentView]


def view(session: Session, *, rollout: Rollout, policy: Policy, now: datetime) -> CrossoverView:
    """Return the crossover the gateway routes the rollout's requests by at `now`."""
    promotion = policy.promotion
    crossover = crossovers(session, [rollout.id]).get(rollout.id)
    by_load = ByLoad(promotion.hysteresis, promotion.crossover_max_age_s, crossover)
    source, levels = by_load.effective(now.timestamp())
    measured = crossover.measured_at if crossover is not None else None
    return CrossoverView(
        routing_by_load=rollout.state is RolloutState.PROMOTED,
        source=source,
        measured_at=datetime.fromtimestamp(measured, UTC) if measured is not None else None,
        max_age_s=promotion.crossover_max_age_s,
        hysteresis=promotion.hysteresis,
        segments={name: _segment(by_load, name, level) for name, level in levels.items()},
    )


def _segment(by_load: ByLoad, name: str, level: int) -> SegmentView:
    if by_load.crossover is None:
        return SegmentView(crossover=level)
    measured = by_load.crossover.segments[name]
    return SegmentView(crossover=level, low=measured.low, high=measured.high, text=measured.text)
