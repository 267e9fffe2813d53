"""A summary of what the store holds, for `specgate status` and health output."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gate.db.base import utcnow
from gate.db.enums import PairState
from gate.db.models import (
    Evaluation,
    Generation,
    Pair,
    Rollout,
    Route,
    SpanRecord,
    Verdict,
)

COUNTED = {
    "routes": Route,
    "rollouts": Rollout,
    "pairs": Pair,
    "generations": Generation,
    "spans": SpanRecord,
    "evaluations": Evaluation,
    "verdicts": Verdict,
}


@dataclass(frozen=True)
class StoreStatus:
    """Row counts per table and rollouts per state."""

    counts: dict[str, int]
    rollouts_by_state: dict[str, int] = field(default_factory=dict)
    # Complete pairs whose evaluations have not landed, and the age of the oldest (s).
    awaiting_evaluation: int = 0
    oldest_awaiting_s: float | None = None

    @property
    def empty(self) -> bool:
        """Whether the store holds no rollouts and no telemetry."""
        return not any(self.counts.values())


def store_status(session: Session) -> StoreStatus:
    """Count what the store holds."""
    counts = {
        name: session.scalar(select(func.count()).select_from(model)) or 0
        for name, model in COUNTED.items()
    }
    by_state = session.execute(select(Rollout.state, func.count()).group_by(Rollout.state)).all()
    waiting, oldest = session.execute(
        select(func.count(), func.min(Pair.completed_at)).where(
            Pair.state == PairState.COMPLETE, Pair.evaluated_at.is_(None)
        )
    ).one()
    age = (utcnow() - oldest).total_seconds() if oldest is not None else None
    return StoreStatus(
        counts,
        {state.value: count for state, count in by_state},
        awaiting_evaluation=waiting or 0,
        oldest_awaiting_s=age,
    )
