"""Complete pairs whose sides have landed, drop those past their deadline, enqueue evaluation.

A shadow pair needs its baseline and candidate calls, a control pair its two baseline
calls; a canary pair is one request served by one route, so one call completes it.
A pair still missing a side at its deadline is `dropped`: the gate counts those and holds
when too many are missing, rather than comparing survivors. The sweep also catches up
what a failure lost: completions missed after a stored batch, and evaluations never run.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gate.db.base import utcnow
from gate.db.enums import Cohort, PairState, RolloutMode
from gate.db.hooks import after_commit
from gate.db.models import Generation, Pair, Rollout
from gate.pairs.watermark import stamp_evaluated

log = logging.getLogger(__name__)

Enqueue = Callable[[Sequence[uuid.UUID]], None]


def expected_cohorts(*, is_control: bool, mode: RolloutMode) -> frozenset[Cohort] | None:
    """Return the cohorts a pair needs, or None when any one landed call completes it."""
    if is_control:
        return frozenset({Cohort.BASELINE, Cohort.CONTROL})
    if mode is RolloutMode.CANARY:
        return None
    return frozenset({Cohort.BASELINE, Cohort.CANDIDATE})


def complete_ready(
    session: Session, *, pair_ids: Sequence[uuid.UUID], enqueue: Enqueue | None
) -> list[uuid.UUID]:
    """Mark the open pairs among `pair_ids` complete when their sides are all in."""
    if not pair_ids:
        return []
    rows = session.execute(
        select(Pair.id, Pair.is_control, Rollout.mode, Generation.cohort)
        .join(Rollout, Rollout.id == Pair.rollout_id)
        .join(Generation, Generation.pair_id == Pair.id)
        .where(Pair.id.in_(pair_ids), Pair.state == PairState.OPEN)
    ).all()
    landed: dict[uuid.UUID, set[Cohort]] = {}
    needs: dict[uuid.UUID, frozenset[Cohort] | None] = {}
    for pair_id, is_control, mode, cohort in rows:
        landed.setdefault(pair_id, set()).add(cohort)
        needs[pair_id] = expected_cohorts(is_control=is_control, mode=mode)
    ready = [p for p, cohorts in landed.items() if _complete(needs[p], cohorts)]
    # Only the pairs this UPDATE moved: a concurrent caller completing the same pair
    # must not enqueue it twice.
    moved = _set_state(session, ready, PairState.COMPLETE)
    if enqueue is not None and moved:
        after_commit(session, lambda: enqueue(moved))
    return moved


def _complete(needed: frozenset[Cohort] | None, landed: set[Cohort]) -> bool:
    return bool(landed) if needed is None else needed <= landed


def sweep_deadlines(
    session: Session,
    *,
    enqueue: Enqueue | None = None,
    now: datetime | None = None,
    limit: int = 1000,
) -> int:
    """Close open pairs past their deadline; return how many were dropped.

    A pair whose sides all landed but whose completion was missed (the database failed
    right after the collector stored the batch) is completed and enqueued, not dropped.
    """
    expired = list(
        session.scalars(
            select(Pair.id)
            .where(Pair.state == PairState.OPEN, Pair.deadline < (now or utcnow()))
            .limit(limit)
        )
    )
    late = set(complete_ready(session, pair_ids=expired, enqueue=enqueue))
    if late:
        log.warning("pairs_completed_late count=%d", len(late))
    dropped = _set_state(session, [p for p in expired if p not in late], PairState.DROPPED)
    # A dropped pair gets no evaluations: it is ready for the gate (which counts it) now.
    stamp_evaluated(session, pair_ids=dropped)
    return len(dropped)


def requeue_unevaluated(
    session: Session,
    *,
    enqueue: Enqueue,
    after_s: float,
    give_up_s: float,
    now: datetime | None = None,
    limit: int = 500,
) -> list[uuid.UUID]:
    """Enqueue again, after commit, complete pairs still unevaluated `after_s` after they
    completed (the broker was down then, or the run failed), oldest first. Evaluations are
    idempotent, so a pair that was only slow is scored once. Pairs completed more than
    `give_up_s` ago are left to `specgate status`, which counts them."""
    now = now or utcnow()
    pair_ids = list(
        session.scalars(
            select(Pair.id)
            .where(
                Pair.state == PairState.COMPLETE,
                Pair.evaluated_at.is_(None),
                Pair.completed_at < now - timedelta(seconds=after_s),
                Pair.completed_at >= now - timedelta(seconds=give_up_s),
            )
            .order_by(Pair.completed_at)
            .limit(limit)
        )
    )
    if pair_ids:
        log.warning("pairs_requeued count=%d", len(pair_ids))
        after_commit(session, lambda: enqueue(pair_ids))
    return pair_ids


def _set_state(
    session: Session, pair_ids: Sequence[uuid.UUID], state: PairState
) -> list[uuid.UUID]:
    if not pair_ids:
        return []
    moved = session.scalars(
        update(Pair)
        .where(Pair.id.in_(pair_ids), Pair.state == PairState.OPEN)
        .values(state=state, completed_at=utcnow())
        .returning(Pair.id)
    )
    return list(moved)
