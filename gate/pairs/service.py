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
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from gate.db.base import utcnow
from gate.db.enums import Cohort, PairState, RolloutMode
from gate.db.hooks import after_commit
from gate.db.models import Generation, Pair, Rollout
from gate.pairs.watermark import stamp_evaluated
from gate.verdicts.slices import pair_calls_since

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
    session: Session,
    *,
    pair_ids: Sequence[uuid.UUID],
    enqueue: Enqueue | None,
    at_deadline: bool = False,
) -> list[uuid.UUID]:
    """Mark the open pairs among `pair_ids` complete when their sides are all in, and their
    own span (the request, the episode: `pairs.pair_span`) is too; `at_deadline`, without
    it: a pair span that has not come by then may never come."""
    if not pair_ids:
        return []
    which = [Pair.id.in_(pair_ids), Pair.state == PairState.OPEN]
    if not at_deadline:
        which.append(Pair.pair_span.is_(True))
    open_pairs = session.execute(
        select(Pair.id, Pair.is_control, Rollout.mode, Pair.created_at)
        .join(Rollout, Rollout.id == Pair.rollout_id)
        .where(*which)
    ).all()
    if not open_pairs:
        return []
    needs = {p: expected_cohorts(is_control=c, mode=m) for p, c, m, _ in open_pairs}
    landed = _landed(session, needs, since=pair_calls_since(row[3] for row in open_pairs))
    ready = [p for p, cohorts in landed.items() if _complete(needs[p], cohorts)]
    # Only the pairs this UPDATE moved: a concurrent caller completing the same pair
    # must not enqueue it twice.
    moved = _set_state(session, ready, PairState.COMPLETE)
    if enqueue is not None and moved:
        after_commit(session, lambda: enqueue(moved))
    return moved


def _landed(
    session: Session, pair_ids: Iterable[uuid.UUID], *, since: datetime
) -> dict[uuid.UUID, set[Cohort]]:
    # Bounded by the pairs' start, as their calls are: a partitioned `generations` is read
    # from the pairs' partitions on, not over its whole history.
    landed: dict[uuid.UUID, set[Cohort]] = {}
    for pair_id, cohort in session.execute(
        select(Generation.pair_id, Generation.cohort).where(
            Generation.pair_id.in_(list(pair_ids)), Generation.started_at >= since
        )
    ):
        assert pair_id is not None  # matched on it
        landed.setdefault(pair_id, set()).add(cohort)
    return landed


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
    right after the collector stored the batch), or whose own span never came, is
    completed and enqueued, not dropped.
    """
    expired = list(
        session.scalars(
            select(Pair.id)
            .where(Pair.state == PairState.OPEN, Pair.deadline < (now or utcnow()))
            .limit(limit)
        )
    )
    late = set(complete_ready(session, pair_ids=expired, enqueue=enqueue, at_deadline=True))
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
    max_requeues: int,
    now: datetime | None = None,
    limit: int = 500,
) -> list[uuid.UUID]:
    """Enqueue again, after commit, complete pairs still unevaluated `after_s` after they
    completed (the broker was down then, or the run failed), oldest first.

    Each pair is claimed by bumping its `requeues` (a concurrent sweep claims nothing
    twice) and waits twice as long before its next try: `after_s`, `2 * after_s`, ...
    After `max_requeues` tries it is left alone; `specgate status` counts it.
    """
    now = now or utcnow()
    due = session.execute(
        select(Pair.id, Pair.requeues)
        .where(
            Pair.state == PairState.COMPLETE,
            Pair.evaluated_at.is_(None),
            Pair.completed_at < now - timedelta(seconds=after_s),
            Pair.requeues < max_requeues,
            or_(Pair.requeue_after.is_(None), Pair.requeue_after < now),
        )
        .order_by(Pair.completed_at)
        .limit(limit)
    ).all()
    by_tries: dict[int, list[uuid.UUID]] = {}
    for pair_id, tries in due:
        by_tries.setdefault(tries, []).append(pair_id)
    claimed: list[uuid.UUID] = []
    for tries, pair_ids in by_tries.items():
        wait = timedelta(seconds=after_s * 2 ** (tries + 1))
        claimed += session.scalars(
            update(Pair)
            .where(Pair.id.in_(pair_ids), Pair.requeues == tries)
            .values(requeues=tries + 1, requeue_after=now + wait)
            .returning(Pair.id)
        )
    won = set(claimed)
    claimed = [pair_id for pair_id, _ in due if pair_id in won]  # oldest first
    if claimed:
        log.warning("pairs_requeued count=%d", len(claimed))
        after_commit(session, lambda: enqueue(claimed))
    return claimed


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
