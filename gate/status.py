"""A summary of what the store holds, for `specgate status` and health output."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

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
    return StoreStatus(counts, {state.value: count for state, count in by_state})
