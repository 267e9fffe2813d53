"""A stage's stored fold state: lock it, fold in the pairs evaluated since, write it back.

One state per (rollout, stage, arm): a rollout of one candidate folds every pair of the
stage (arm `NO_ARM`); one with several candidates folds each arm's pairs, its own and the
control pairs (`gate.stats.arms.member`, the same membership replay uses), with the arm's
sums its verdict shows (`gate.verdicts.acceptance`).

Postgres only (the slice queries are). No commit here: the gate's transaction owns it, so
the state and the verdict computed from it are stored together or not at all.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from gate.db import storage
from gate.db.enums import RolloutMode
from gate.db.models import GateFold
from gate.db.models.quality import NO_ARM
from gate.pairs.watermark import fold_horizon
from gate.stats import episode_sums, fold_json, incremental
from gate.stats.episode_sums import SidesSums
from gate.stats.incremental import FoldState, Key
from gate.stats.policy import Policy
from gate.verdicts import acceptance, aggregates, episodes, feedback
from gate.verdicts.acceptance import ArmSums
from gate.verdicts.aggregates import delta
from gate.verdicts.slices import Slice, first_keys, last_key, rollout_since, stage_since
from gate.verdicts.warmup import warmup

# What one fold state judges: (rollout id, stage, load tolerance, arm (None: every pair)).
Judged = tuple[int, int, float | None, str | None]


def in_sql(session: Session, *, mode: RolloutMode) -> bool:
    """Return whether a rollout's stage is folded here (Postgres, shadow, every guardrail's
    statistics built by the fold's SQL); else it is replayed at each look."""
    foldable = all(aggregates.foldable(g) for g in incremental.folded())
    return storage.of(session).folds_in_sql and mode is RolloutMode.SHADOW and foldable


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
    return _fold(session, (rollout_id, stage, load_match, None), policy)[1]


def fold_arm(
    session: Session,
    *,
    rollout_id: int,
    stage: int,
    arm: str,
    policy: Policy,
    load_match: float | None = None,
) -> tuple[FoldState, ArmSums]:
    """Fold the newly evaluated pairs of one arm of the stage (its own and the control
    pairs, `gate.stats.arms.member`) into its stored state; return it and the arm's sums
    (first pair, acceptance length), folded up to the same pair."""
    row, state = _fold(session, (rollout_id, stage, load_match, arm), policy)
    if state.watermark is None:
        return state, ArmSums()
    since, opened = _bounds(session, rollout_id, stage)
    piece = Slice(rollout_id, stage, after=None, upto=state.watermark, arm=arm, since=since,
                  opened_since=opened)  # fmt: skip
    sums, stored = acceptance.advance(session, row.arm_sums, piece, policy)
    if stored != row.arm_sums:
        row.arm_sums = stored
    return state, sums


def feedback_sums(
    session: Session,
    *,
    rollout_id: int,
    stage: int,
    state: FoldState,
    policy: Policy,
    load_match: float | None = None,
    arm: str | None = None,
) -> dict[str, SidesSums]:
    """Return the feedback cells' sums of the state's pairs (up to its watermark, judged
    as it judged them), folding in the ratings and pairs new since the last look
    (`gate.verdicts.feedback`); stored with the (rollout, stage, arm) state."""
    if state.watermark is None:
        return {}
    # Exclusive, as the fold holds it: every rating of the rollout made so far is committed
    # and a later one gets a larger id (`gate.feedback.service.record` holds it shared).
    fold_horizon(session, rollout_id=rollout_id)
    row = _locked_row(session, rollout_id=rollout_id, stage=stage, arm=arm or NO_ARM)
    since, opened = _bounds(session, rollout_id, stage)
    piece = Slice(rollout_id, stage, after=None, upto=state.watermark, load_match=load_match,
                  arm=arm, since=since, opened_since=opened)  # fmt: skip
    warm = first_keys(session, replace(piece, load_match=None), policy, policy.warmup_pairs)
    piece = replace(piece, warm_upto=warm[-1] if warm else None)
    sums, stored = feedback.advance(session, row.ratings, piece, policy)
    if stored != row.ratings:
        row.ratings = stored
    return sums


# The stage's and the rollout's first pairs' times less the slack (`stage_since`,
# `rollout_since`), as the last `_fold` of this transaction read them after its horizon.
# The reads after it in the same look (an arm's sums, the ratings) go only up to its
# watermark, whose pairs they cover, so they reuse them: no time bound prunes this read,
# so it is planned over every partition of `pairs` (~0.1 s with hourly partitions over 14
# days, BENCHMARKS.md, issue 43).
_BOUNDS = "gate.verdicts.folds.bounds"
Bounds = tuple[datetime, datetime]


def _read_bounds(session: Session, rollout_id: int, stage: int) -> Bounds:
    """Read the stage's and the rollout's bounds, and keep them for this transaction."""
    since = stage_since(session, rollout_id=rollout_id, stage=stage)
    opened = since if stage == 0 else rollout_since(session, rollout_id=rollout_id)
    session.info[_BOUNDS] = (session.get_transaction(), (rollout_id, stage), (since, opened))
    return since, opened


def _bounds(session: Session, rollout_id: int, stage: int) -> Bounds:
    """Return the bounds the last fold of this transaction read, or read them."""
    held = session.info.get(_BOUNDS)
    if held and held[0] is session.get_transaction() and held[1] == (rollout_id, stage):
        since, opened = held[2]
        return since, opened
    return _read_bounds(session, rollout_id, stage)


def _fold(session: Session, judged: Judged, policy: Policy) -> tuple[GateFold, FoldState]:
    """Lock the (rollout, stage, arm) state, fold the new pairs in, write it back."""
    # JIT compiling the wide slice aggregates costs seconds, more than it ever saves here.
    session.execute(text("SET LOCAL jit = off"))
    rollout_id, stage, load_match, arm = judged
    horizon = fold_horizon(session, rollout_id=rollout_id)
    row = _locked_row(session, rollout_id=rollout_id, stage=stage, arm=arm or NO_ARM)
    key = incremental.policy_key(policy, load_match)
    # Another policy (warm-up, segments, quantiles, the load tolerance: a promotion by load
    # turns it on) means other statistics: start over.
    stored = _load(row) if row.policy_key == key else FoldState(policy_key=key)
    if row.policy_key != key:
        # The arm's sums and the ratings are stored with the state (FOLD_VERSION covers
        # them): start over too.
        row.arm_sums = row.ratings = None
    # After the horizon: every pair stamped up to it is committed, so none is older.
    since, opened = _read_bounds(session, rollout_id, stage)
    state = _advance(session, stored, judged, policy, (since, opened, horizon))
    if state is not stored:
        _save(row, state)
    return row, state


def _advance(
    session: Session,
    state: FoldState,
    judged: Judged,
    policy: Policy,
    window: tuple[datetime, datetime, datetime],
) -> FoldState:
    rollout_id, stage, load_match, arm = judged
    since, opened, horizon = window
    last = last_key(
        session, rollout_id=rollout_id, stage=stage, horizon=horizon, arm=arm, since=since
    )
    if last is None or (state.watermark is not None and last <= state.watermark):
        return state
    piece = Slice(
        rollout_id,
        stage,
        after=state.watermark,
        upto=last,
        load_match=load_match,
        arm=arm,
        since=since,
        opened_since=opened,
    )
    needed = policy.warmup_pairs - state.warm_pairs
    if needed > 0:
        # The warm-up is the first pairs in fold order; fix its thresholds once it is full.
        keys = first_keys(session, piece, policy, needed)
        piece = replace(piece, warm_upto=keys[-1] if keys else None)
        if len(keys) == needed:
            whole = replace(piece, after=None, upto=keys[-1], warm_upto=keys[-1], load_match=None)
            state = replace(state, warmup=warmup(session, whole, policy))
    added = delta(session, piece, policy, state.warmup)
    names = {*state.evaluators, *added.evaluators}
    if names - set(state.evaluators) and any(b.both_failed for b in state.buckets.values()):
        # Ties folded before an evaluator was first seen are its ties too (replay counts
        # them): its episode sums need those pairs again, so fold the stage from scratch.
        return _advance(session, FoldState(policy_key=state.policy_key), judged, policy, window)
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


def _locked_row(session: Session, *, rollout_id: int, stage: int, arm: str) -> GateFold:
    statement = (
        select(GateFold)
        .where(GateFold.rollout_id == rollout_id, GateFold.stage == stage, GateFold.arm == arm)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    row = session.scalars(statement).one_or_none()
    if row is None:
        session.execute(
            storage.of(session)
            .insert(GateFold)
            .values(rollout_id=rollout_id, stage=stage, arm=arm)
            .on_conflict_do_nothing(index_elements=["rollout_id", "stage", "arm"])
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
        warmup=fold_json.load_warmup(row.warmup),
        buckets=fold_json.load_buckets(row.segments),
        evaluators=fold_json.load_evaluators(row.evaluators),
        collapse=fold_json.load_collapse(row.collapse),
        control=fold_json.load_control(row.control),
        bands=fold_json.load_bands(row.bands),
        episodes=episode_sums.load((row.episodes or {}).get("sums")),
        shared=bool((row.episodes or {}).get("shared", False)),
    )


def _save(row: GateFold, state: FoldState) -> None:
    row.policy_key = state.policy_key
    row.watermark_at, row.watermark_id = state.watermark or (None, None)
    row.pairs, row.warm_pairs = state.pairs, state.warm_pairs
    row.first_at, row.last_at = state.first_at, state.last_at
    row.warmup = fold_json.dump(state.warmup)
    row.segments = fold_json.dump(state.buckets)
    row.evaluators = fold_json.dump(state.evaluators)
    row.collapse = fold_json.dump(state.collapse)
    row.control = fold_json.dump(state.control)
    row.bands = [fold_json.dump(b) for b in state.bands]
    row.episodes = {"shared": state.shared, "sums": episode_sums.dump(state.episodes)}
