"""Record feedback against the generation the user saw."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gate.db.base import utcnow
from gate.db.enums import Cohort
from gate.db.models import Feedback, Generation, Pair
from gate.errors import NotFound
from gate.pairs.watermark import hold_for_ratings
from gate.verdicts.slices import pair_calls_since

# In a pair the user saw the served side: the candidate only in canary (one call per
# pair), else the baseline. Baseline first, then candidate, never the control call.
_SERVED_ORDER = (Cohort.BASELINE, Cohort.CANDIDATE)
# Feedback by response id names a response of the last week (a user rates an answer within
# minutes; the 7-day content rule has scrubbed an older one's text by then): nothing in the
# id says when it was served, and the bound keeps the lookup off older partitions.
FEEDBACK_WINDOW = timedelta(days=7)


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
    if generation.rollout_id is not None:
        # Ratings are folded by id: none may commit behind a look (`gate.verdicts.feedback`).
        hold_for_ratings(db, rollout_id=generation.rollout_id)
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
        target = f"response {response_id} in the last {FEEDBACK_WINDOW.days} days"
        since = utcnow() - FEEDBACK_WINDOW
        statement = statement.where(Generation.response_id == response_id)
    else:
        target = f"pair {pair_id}"
        created = db.scalars(select(Pair.created_at).where(Pair.id == pair_id)).all()
        if not created:
            raise NotFound(f"no generation for {target}")
        since = pair_calls_since(created)
        statement = statement.where(Generation.pair_id == pair_id)
    # Bounded by time, so a partitioned `generations` is read from `since` on, not whole.
    found = {g.cohort: g for g in db.scalars(statement.where(Generation.started_at >= since))}
    for cohort in _SERVED_ORDER:
        if cohort in found:
            return found[cohort]
    raise NotFound(f"no generation for {target}")
