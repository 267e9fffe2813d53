"""Record feedback against the generation the user saw."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from gate.db.enums import Cohort
from gate.db.models import Feedback, Generation
from gate.errors import NotFound

# In a pair the user saw the served side: the candidate only in canary (one call per
# pair), else the baseline. Baseline first, then candidate, never the control call.
_SERVED_ORDER = (Cohort.BASELINE, Cohort.CANDIDATE)


def record(
    db: Session,
    *,
    response_id: str | None,
    pair_id: uuid.UUID | None,
    thumbs: int | None,
    score: float | None,
    escalated: bool,
    comment: str | None,
) -> Feedback:
    """Store feedback joined to its generation; unknown targets are a 404."""
    generation = _served(db, response_id=response_id, pair_id=pair_id)
    row = Feedback(
        generation_id=generation.id,
        pair_id=generation.pair_id,
        response_id=response_id or generation.response_id,
        thumbs=thumbs,
        score=score,
        escalated=escalated,
        comment=comment,
    )
    db.add(row)
    db.flush()
    return row


def _served(db: Session, *, response_id: str | None, pair_id: uuid.UUID | None) -> Generation:
    statement = select(Generation).where(Generation.cohort.in_(_SERVED_ORDER))
    if response_id is not None:
        statement = statement.where(Generation.response_id == response_id)
    else:
        statement = statement.where(Generation.pair_id == pair_id)
    found = {g.cohort: g for g in db.scalars(statement)}
    for cohort in _SERVED_ORDER:
        if cohort in found:
            return found[cohort]
    target = f"response {response_id}" if response_id is not None else f"pair {pair_id}"
    raise NotFound(f"no generation for {target}")
