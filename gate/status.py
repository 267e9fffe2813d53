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
    # Complete pairs whose evaluations have not landed, the age of the oldest (s), and
    # how many of them the sweep has given up enqueueing again.
    awaiting_evaluation: int = 0
    oldest_awaiting_s: float | None = None
    requeues_exhausted: int = 0

    @property
    def empty(self) -> bool:
        """Whether the store holds no rollouts and no telemetry."""
        return not any(self.counts.values())


def store_status(session: Session, *, max_requeues: int) -> StoreStatus:
    """Count what the store holds (`max_requeues`: the sweep's limit, for given-up pairs)."""
    counts = {
        name: session.scalar(select(func.count()).select_from(model)) or 0
        for name, model in COUNTED.items()
    }
    by_state = session.execute(select(Rollout.state, func.count()).group_by(Rollout.state)).all()
    waiting, oldest, exhausted = session.execute(
        select(
            func.count(),
            func.min(Pair.completed_at),
            func.count().filter(Pair.requeues >= max_requeues),
        ).where(Pair.state == PairState.COMPLETE, Pair.evaluated_at.is_(None))
    ).one()
    age = (utcnow() - oldest).total_seconds() if oldest is not None else None
    return StoreStatus(
        counts,
        {state.value: count for state, count in by_state},
        awaiting_evaluation=waiting or 0,
        oldest_awaiting_s=age,
        requeues_exhausted=exhausted or 0,
    )


def unsandboxed_evaluations(session: Session) -> int:
    """Count evaluations recorded not evaluable because no sandbox could run their code."""
    query = select(func.count()).where(Evaluation.not_evaluable == "no_sandbox")
    return session.scalar(query) or 0
