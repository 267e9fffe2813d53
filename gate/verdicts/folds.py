"""A stage's stored fold state: lock it, fold in the pairs evaluated since, write it back.

Postgres only (the slice queries are). No commit here: the gate's transaction owns it, so
the state and the verdict computed from it are stored together or not at all.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from gate.db import storage
from gate.db.models import GateFold
from gate.pairs.watermark import fold_horizon
from gate.stats import episode_sums, incremental
from gate.stats.incremental import FoldState, Key
from gate.stats.policy import Policy
from gate.verdicts import episodes
from gate.verdicts.aggregates import delta
from gate.verdicts.slices import Slice, first_keys, last_key
from gate.verdicts.warmup import warmup


def fold(
    session: Session,
    *,
    rollout_id: int,
    stage: int,
    policy: Policy,
    load_match: float | None = None,
) -> FoldState:
    """Fold the stage's newly evaluated pairs into its stored state; return the state.

    `load_match`: judge only load-matched pairs (`policy.load_tolerance`; None: all)."""
    # JIT compiling the wide slice aggregates costs seconds, more than it ever saves here.
    session.execute(text("SET LOCAL jit = off"))
    horizon = fold_horizon(session, rollout_id=rollout_id)
    row = _locked_row(session, rollout_id=rollout_id, stage=stage)
    key = incremental.policy_key(policy, load_match)
    # Another policy (warm-up, segments, quantiles, the load tolerance: a promotion by load
    # turns it on) means other statistics: start over.
    stored = _load(row) if row.policy_key == key else FoldState(policy_key=key)
    state = _advance(session, stored, (rollout_id, stage, load_match), policy, horizon)
    if state is not stored:
        _save(row, state)
    return state


def _advance(
    session: Session,
    state: FoldState,
    judged: tuple[int, int, float | None],
    policy: Policy,
    horizon: datetime,
) -> FoldState:
    rollout_id, stage, load_match = judged
    last = last_key(session, rollout_id=rollout_id, stage=stage, horizon=horizon)
    if last is None or (state.watermark is not None and last <= state.watermark):
        return state
    piece = Slice(rollout_id, stage, after=state.watermark, upto=last, load_match=load_match)
    needed = policy.warmup_pairs - state.warm_pairs
    if needed > 0:
        # The warm-up is the first pairs in fold order; fix its thresholds once it is full.
        keys = first_keys(session, piece, policy, needed)
        piece = replace(piece, warm_upto=keys[-1] if keys else None)
        if len(keys) == needed:
            whole = Slice(rollout_id, stage, after=None, upto=keys[-1], warm_upto=keys[-1])
            state = replace(state, warmup=warmup(session, whole, policy))
    added = delta(session, piece, policy, state.warmup)
    names = {*state.evaluators, *added.evaluators}
    if names - set(state.evaluators) and any(b.both_failed for b in state.buckets.values()):
        # Ties folded before an evaluator was first seen are its ties too (replay counts
        # them): its episode sums need those pairs again, so fold the stage from scratch.
        return _advance(session, FoldState(policy_key=state.policy_key), judged, policy, horizon)
    if added.named:
        warm_end = piece.warm_upto if needed > 0 else _warm_end(session, piece, policy)
        piece = replace(piece, warm_upto=warm_end)
    sums, shared = episodes.added(session, piece, policy, state.warmup, delta=added, names=names)
    return incremental.add(state, replace(added, episodes=sums, shared=shared))


def _warm_end(session: Session, piece: Slice, policy: Policy) -> Key | None:
    """Return the last warm-up pair of the stage, in fold order (None: no warm-up)."""
    if policy.warmup_pairs <= 0:
        return None
    whole = replace(piece, after=None, warm_upto=None)
    keys = first_keys(session, whole, policy, policy.warmup_pairs)
    return keys[-1] if keys else None


def _locked_row(session: Session, *, rollout_id: int, stage: int) -> GateFold:
    statement = (
        select(GateFold)
        .where(GateFold.rollout_id == rollout_id, GateFold.stage == stage)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    row = session.scalars(statement).one_or_none()
    if row is None:
        session.execute(
            storage.of(session)
            .insert(GateFold)
            .values(rollout_id=rollout_id, stage=stage)
            .on_conflict_do_nothing(index_elements=["rollout_id", "stage"])
        )
        row = session.scalars(statement).one()
    return row


def _load(row: GateFold) -> FoldState:
    watermark = None
    if row.watermark_at is not None and row.watermark_id is not None:
        watermark = (row.watermark_at, row.watermark_id)
    return FoldState(
        policy_key=row.policy_key,
        watermark=watermark,
        pairs=row.pairs,
        warm_pairs=row.warm_pairs,
        first_at=row.first_at,
        last_at=row.last_at,
        warmup=incremental.load_warmup(row.warmup),
        buckets=incremental.load_buckets(row.segments),
        evaluators=incremental.load_evaluators(row.evaluators),
        collapse=incremental.load_collapse(row.collapse),
        control=incremental.load_control(row.control),
        bands=incremental.load_bands(row.bands),
        episodes=episode_sums.load((row.episodes or {}).get("sums")),
        shared=bool((row.episodes or {}).get("shared", False)),
    )


def _save(row: GateFold, state: FoldState) -> None:
    row.policy_key = state.policy_key
    row.watermark_at, row.watermark_id = state.watermark or (None, None)
    row.pairs, row.warm_pairs = state.pairs, state.warm_pairs
    row.first_at, row.last_at = state.first_at, state.last_at
    row.warmup = incremental.dump(state.warmup)
    row.segments = incremental.dump(state.buckets)
    row.evaluators = incremental.dump(state.evaluators)
    row.collapse = incremental.dump(state.collapse)
    row.control = incremental.dump(state.control)
    row.bands = [incremental.dump(b) for b in state.bands]
    row.episodes = {"shared": state.shared, "sums": episode_sums.dump(state.episodes)}
