"""Recorded pairs as records of the replay JSONL schema (see `gate.stats.replay`)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, select, tuple_
from sqlalchemy.orm import InstrumentedAttribute, Session

from gate.db import storage
from gate.db.enums import Cohort, PairState
from gate.db.models import Evaluation, Feedback, Generation, Pair, RequestRecord
from gate.pairs import load
from gate.verdicts.slices import episodes_before, pair_calls_since, rollout_since

CHUNK = 5000
# The record side each cohort's generation fills (a control pair's second call: candidate).
SIDES = {Cohort.BASELINE: "baseline", Cohort.CANDIDATE: "candidate", Cohort.CONTROL: "candidate"}
_CLOSED = (PairState.COMPLETE, PairState.DROPPED)


def pair_records(
    session: Session,
    *,
    rollout_id: int,
    stage: int | None = None,
    evaluated_only: bool = False,
    with_requests: bool = False,
) -> Iterator[dict[str, Any]]:
    """Yield the rollout's closed pairs as replay records, in fold order.

    Fold order (the gate's, see `gate.stats.incremental`): evaluated pairs by
    (evaluated_at, id); then, unless `evaluated_only`, pairs whose evaluations have not
    landed yet, oldest first. `with_requests` adds each pair's kept request (`request`:
    endpoint, body, declared inputs, and what the gateway cut), for `specgate rehearse`.
    Each side carries `load`: its route's running requests at the pair's start
    (`gate.pairs.load`; null when unknown), which the gate's load bands read: the load
    stamped with the pair, so a replay reads what the fold sums; computed now only for a
    pair not stamped yet.
    """
    orders = [(Pair.evaluated_at.is_not(None), (Pair.evaluated_at, Pair.id))]
    if not evaluated_only:
        orders.append((Pair.evaluated_at.is_(None), (Pair.created_at, Pair.id)))
    # Two orders, several queries: read from one snapshot, or a pair stamped by a worker
    # between them would be in neither (or, read twice, in both).
    one_read = nullcontext(session) if evaluated_only else storage.of(session).snapshot(session)
    with one_read as reading:
        for where, order in orders:
            for page in _pages(reading, rollout_id, stage, where, order):
                yield from _records(reading, page, with_requests, _loads(reading, page))


def _pages(
    session: Session,
    rollout_id: int,
    stage: int | None,
    where: ColumnElement[bool],
    order: tuple[InstrumentedAttribute[Any], InstrumentedAttribute[Any]],
) -> Iterator[list[Pair]]:
    after: tuple[Any, uuid.UUID] | None = None
    while True:
        statement = (
            select(Pair)
            .where(Pair.rollout_id == rollout_id, Pair.state.in_(_CLOSED), where)
            .order_by(*order)
            .limit(CHUNK)
        )
        if stage is not None:
            statement = statement.where(Pair.stage == stage)
        if after is not None:
            statement = statement.where(tuple_(*order) > after)
        pairs = list(session.scalars(statement))
        if not pairs:
            return
        yield pairs
        last = pairs[-1]
        after = (getattr(last, order[0].key), last.id)


def _loads(
    session: Session, pairs: Sequence[Pair]
) -> dict[uuid.UUID, tuple[float | None, float | None]]:
    """Return each pair's (baseline, candidate) load: stamped, else computed now."""
    found = {p.id: load.stamped(p) for p in pairs}
    waiting = [p.id for p in pairs if p.evaluated_at is None]
    for computed in load.loads_of(session, pair_ids=waiting):
        found[computed.pair_id] = computed
    return {
        pair_id: (None, None) if got is None else (got.baseline.value, got.candidate.value)
        for pair_id, got in found.items()
    }


def _records(
    session: Session,
    pairs: Sequence[Pair],
    with_requests: bool,
    loads: dict[uuid.UUID, tuple[float | None, float | None]],
) -> Iterator[dict[str, Any]]:
    since = _since(pairs)
    mine = Generation.pair_id.in_([p.id for p in pairs]), Generation.started_at >= since
    generations = list(session.scalars(select(Generation).where(*mine)))
    ids = [g.id for g in generations]
    evals: dict[int, dict[str, bool | None]] = defaultdict(dict)
    # Each carries its generation's start: a partitioned `evaluations` is read from `since`.
    theirs = Evaluation.generation_id.in_(ids), Evaluation.generation_started_at >= since
    for generation_id, name, passed in session.execute(
        select(Evaluation.generation_id, Evaluation.evaluator, Evaluation.passed).where(*theirs)
    ):
        # Several versions of one evaluator: it passes only if all that were evaluable
        # passed (the fold's bool_and); one never evaluable is kept as null, so a replay of
        # the export sees the evaluator, as the fold does (neither a pass nor a fail).
        before = evals[generation_id].get(name)
        evals[generation_id][name] = passed if before is None else before and passed is not False
    feedback: dict[int, int] = {}
    for rated, thumbs in session.execute(
        select(Feedback.generation_id, Feedback.thumbs)
        .where(Feedback.generation_id.in_(ids), Feedback.thumbs.is_not(None))
        .order_by(Feedback.id)
    ):
        if rated is not None and thumbs is not None:
            # The first rating wins: an outcome once read never changes at a later look,
            # as the gate's bets need (`gate.verdicts.feedback`).
            feedback.setdefault(rated, thumbs)
    sides: dict[uuid.UUID, dict[str, Any]] = defaultdict(dict)
    for g in generations:
        assert g.pair_id is not None
        sides[g.pair_id][SIDES[g.cohort]] = _side(g, evals.get(g.id, {}), feedback.get(g.id))
    kept = _requests(session, pairs) if with_requests else {}
    went_on = _continuing(session, pairs)
    for pair in pairs:
        found = sides.get(pair.id, {})
        for k, name in enumerate(("baseline", "candidate")):
            if name in found:
                found[name]["load"] = loads.get(pair.id, (None, None))[k]
        extra = {"request": kept.get(pair.request_id)} if with_requests else {}
        yield extra | {
            "pair_id": str(pair.id),
            "segment": pair.segment,
            "episode": pair.episode,
            # The episode began in an earlier stage: none of its pairs here opens it.
            "episode_continues": pair.id in went_on,
            # The arm of a rollout with several candidates; null: it has one (or a
            # control pair, which compares the baseline with itself).
            "arm": pair.arm,
            "created_at": pair.created_at.isoformat(),
            "evaluated_at": pair.evaluated_at.isoformat() if pair.evaluated_at else None,
            "is_control": pair.is_control,
            # Dropped at its deadline: the fold never judges it, though a side (a span
            # replayed from the spool) may have landed since.
            "dropped": pair.state is PairState.DROPPED,
            "baseline": found.get("baseline"),
            "candidate": found.get("candidate"),
        }


def _continuing(session: Session, pairs: Sequence[Pair]) -> set[uuid.UUID]:
    """Return the pairs whose episode has a pair in an earlier stage of their rollout."""
    out: set[uuid.UUID] = set()
    for stage in {p.stage for p in pairs if p.stage and p.episode is not None}:
        mine = [p for p in pairs if p.stage == stage and p.episode is not None]
        rollout_id = mine[0].rollout_id
        found = episodes_before(
            session,
            rollout_id=rollout_id,
            stage=stage,
            episodes=sorted({p.episode for p in mine if p.episode is not None}),
            since=rollout_since(session, rollout_id=rollout_id),
        )
        out |= {p.id for p in mine if p.episode in found}
    return out


def _since(pairs: Sequence[Pair]) -> datetime:
    """Return a time no call or request of the pairs is older than, so a partitioned
    `generations` or `requests` reads the page's partitions only: a request has its pair's
    `created_at` and a call starts after it (as the fold's bound)."""
    return pair_calls_since(p.created_at for p in pairs)


def _requests(session: Session, pairs: Sequence[Pair]) -> dict[uuid.UUID | None, Any]:
    ids = [p.request_id for p in pairs if p.request_id is not None]
    kept = RequestRecord.id.in_(ids), RequestRecord.created_at >= _since(pairs)
    rows = session.scalars(select(RequestRecord).where(*kept)) if ids else ()
    return {
        r.id: {"endpoint": r.endpoint, "body": r.body, "inputs": r.inputs, "truncated": r.truncated}
        for r in rows
    }


def _side(g: Generation, evals: dict[str, bool | None], thumbs: int | None) -> dict[str, Any]:
    return {
        "ttft_s": g.ttft_s,
        "tpot_s": g.tpot_s,
        "e2e_s": g.e2e_s,
        "status": g.status.value,
        "evals": evals,
        "draft_tokens": g.spec_draft_tokens or 0,
        "accepted_tokens": g.spec_accepted_tokens or 0,
        "feedback": thumbs,
        **parity_fields(g),
        # Per-token exactness: `gate.exactness_fit.TokenFit.as_dict()`, or None.
        "exactness": g.exactness,
    }


def parity_fields(g: Generation) -> dict[str, Any]:
    """Return what sampled-output parity reads of a side: the settings eligibility
    compares, how the answer ended, and its statistics (see `gate.stats.replay`)."""
    return {
        "temperature": g.temperature,
        "top_p": g.top_p,
        "max_tokens": g.max_tokens,
        "seed": g.seed,
        "finish_reason": g.finish_reason,
        "output_tokens": g.output_tokens,
        "logprob_tokens": g.logprob_tokens,
        "logprob_sum": g.logprob_sum,
        "distinct_2": g.distinct_2,
    }
