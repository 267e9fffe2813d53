"""Recording a rehearsal for a rollout. The caller owns the transaction; it is audited."""

from __future__ import annotations

from sqlalchemy.orm import Session

from gate import audit
from gate.db.base import utcnow
from gate.db.models import Rehearsal
from gate.errors import NotFound
from gate.rehearse import repository
from gate.rehearse.analysis import ALL
from gate.rehearse.schemas import RehearsalIn
from gate.rollouts import service as rollouts


def record(session: Session, *, rollout_id: int, rehearsal: RehearsalIn, actor: str) -> Rehearsal:
    """Keep `rehearsal` as the rollout's latest; return the stored row."""
    rollouts.get_rollout(session, rollout_id=rollout_id)
    repository.upsert(
        session,
        {
            "rollout_id": rollout_id,
            "run_at": rehearsal.run_at,
            "baseline_url": rehearsal.routes.baseline,
            "candidate_url": rehearsal.routes.candidate,
            "workload": rehearsal.workload.source,
            "requests": rehearsal.workload.requests,
            "at": rehearsal.at,
            "decision": rehearsal.decision,
            "summary": rehearsal.document(),
            "recorded_by": actor,
            "recorded_at": utcnow(),
        },
    )
    audit.record(
        session, actor=actor, action="rehearsal.record", rollout_id=rollout_id,
        reason=f"crossover {rehearsal.crossover[ALL].text}; {rehearsal.decision}",
    )  # fmt: skip
    return latest(session, rollout_id=rollout_id)


def latest(session: Session, *, rollout_id: int) -> Rehearsal:
    """Return the rollout's recorded rehearsal, or raise NotFound."""
    rollouts.get_rollout(session, rollout_id=rollout_id)
    row = repository.latest(session, rollout_id=rollout_id)
    if row is None:
        raise NotFound(f"rollout {rollout_id} has no recorded rehearsal")
    return row
