"""Compute, store and apply a rollout's verdict. The caller owns the transaction.

Each run is one look at the stage's evaluated pairs (closed, their evaluations landed).
The gate's intervals are anytime-valid, so looking at every run (every minute, every
dashboard reload, every `gate check`) does not inflate its error rates. Postgres shadow
rollouts fold the pairs evaluated since the last run into stored sufficient statistics
(`gate.verdicts.folds`), so a run costs the new pairs, not all of them; the load bands
too, from each pair's loads stamped with it (`gate.pairs.load`). SQLite and canary
rollouts replay the same pair records that `specgate pairs export` writes, in the same
(fold) order, so both paths judge the same pairs alike.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gate.audit import GATE_ACTOR
from gate.db.enums import Decision, RolloutMode, RolloutState
from gate.db.models import Rollout, Verdict
from gate.errors import InvalidPolicy
from gate.pairs.export import pair_records
from gate.rollouts import service as rollouts
from gate.rollouts.states import Action
from gate.routing import service as routing
from gate.routing import snapshot
from gate.routing.pubsub import Publisher
from gate.stats import fold_stats
from gate.stats.policy import Policy, at_stage, load_policy, load_tolerance, next_stage_share
from gate.stats.replay import replay
from gate.stats.verdict import NO_BASELINE_COHORT, NO_PAIRS, VerdictResult, decide
from gate.verdicts import arms as armgate
from gate.verdicts import availability, folds

log = logging.getLogger(__name__)
# What the gate does to a running rollout on its own, per decision.
AUTOMATIC = {Decision.KILL: Action.KILL, Decision.HOLD: Action.HOLD}


def compute(session: Session, *, rollout: Rollout, policy: Policy) -> VerdictResult:
    """Return the verdict on the rollout's current stage, its candidate's down time included."""
    return _with_arms(session, rollout=rollout, policy=policy)[0]


def _with_arms(
    session: Session, *, rollout: Rollout, policy: Policy
) -> tuple[VerdictResult, dict[str, Any] | None]:
    """Return the verdict, and with arms the choice as JSON (None: one candidate).

    The outage is a global guardrail: it counts the rollout's candidate calls of every arm
    since any last answered, so it kills only when no arm answers; one arm that is down
    fails its own pairs' failure guardrail and is killed on its own.
    """
    if rollout.arms:
        result, choice = armgate.judge(session, rollout=rollout, policy=policy)
    else:
        result, choice = _pairs_verdict(session, rollout=rollout, policy=policy), None
    down = availability.outage(session, rollout_id=rollout.id)
    return availability.judge(result, policy, down), choice


def _pairs_verdict(session: Session, *, rollout: Rollout, policy: Policy) -> VerdictResult:
    """Return the pairs' verdict on the rollout's current stage (at its share of alpha_kill)."""
    # Promoted and routed by load, only load-matched pairs are judged (both paths alike).
    matched = load_tolerance(policy, promoted=rollout.state is RolloutState.PROMOTED)
    if folds.in_sql(session, mode=rollout.mode):
        state = folds.fold(
            session, rollout_id=rollout.id, stage=rollout.stage, policy=policy, load_match=matched
        )
        if not state.pairs:
            return NO_PAIRS
        share = next_stage_share(policy, rollout.stage, RolloutMode.SHADOW)
        rated = folds.feedback_sums(session, rollout_id=rollout.id, stage=rollout.stage,
                                    state=state, policy=policy, load_match=matched)  # fmt: skip
        stats = fold_stats.to_stats(state, policy, next_share=share, feedback=rated)
        return decide(at_stage(policy, rollout.stage), stats)
    records = list(
        pair_records(session, rollout_id=rollout.id, stage=rollout.stage, evaluated_only=True)
    )
    if not records:
        return NO_PAIRS
    share = _canary_share(rollout, policy)
    if share is None:
        return NO_BASELINE_COHORT
    judged = replay(
        records,
        policy,
        every=len(records),
        mode=rollout.mode,
        stage=rollout.stage,
        load_match=matched,
        candidate_share=share,
    )
    return judged.verdict


def _canary_share(rollout: Rollout, policy: Policy) -> float | None:
    """Return the candidate's share of the stage's sampled requests as the gateway splits
    them in canary mode (its inverse-propensity weight; 1/2 in shadow, where it is unused),
    or None where a canary stage leaves no baseline cohort."""
    if rollout.mode is not RolloutMode.CANARY:
        return 0.5
    fraction = snapshot.sampled_fraction(
        rollout.sample_rate, snapshot.stage_percent(policy, rollout.stage)
    )
    return snapshot.canary_candidate_share(fraction)


def run_gate(session: Session, *, rollout_id: int, publisher: Publisher | None) -> Verdict:
    """Judge a running rollout, store the verdict, and kill or hold it when the policy says."""
    rollout = rollouts.get_rollout(session, rollout_id=rollout_id)
    policy = load_policy(rollout.policy)
    result, choice = _with_arms(session, rollout=rollout, policy=policy)
    verdict = Verdict(
        rollout_id=rollout.id,
        stage=rollout.stage,
        decision=result.decision,
        reason_codes=list(result.reason_codes),
        summary=result.summary,
        estimates=result.estimates(),
        n_pairs=result.n_pairs,
        bands=result.band_rows(),
        unmatched=result.unmatched,
        episodes=result.n_episodes,
        arms=choice,
    )
    session.add(verdict)
    session.flush()
    if choice is not None and _acts(rollout, policy, Action.KILL):
        armgate.act(session, rollout=rollout, got=choice, publisher=publisher)
    action = AUTOMATIC.get(result.decision)
    if action is not None and _acts(rollout, policy, action):
        routing.change_state(
            session,
            rollout_id=rollout.id,
            action=action,
            actor=GATE_ACTOR,
            reason=result.summary,
            publisher=publisher,
        )
        log.warning(
            "gate_acted rollout=%d action=%s reasons=%s",
            rollout.id,
            action.value,
            ",".join(result.reason_codes),
        )
    return verdict


def running_rollouts(session: Session) -> Sequence[int]:
    """Return the ids of the rollouts the periodic gate judges: the running ones, and the
    promoted ones routed by load (their mirror slice keeps making pairs)."""
    judged = (RolloutState.RUNNING, RolloutState.PROMOTED)
    statement = select(Rollout).where(Rollout.state.in_(judged)).order_by(Rollout.id)
    return [r.id for r in session.scalars(statement) if _judged(r)]


def _judged(rollout: Rollout) -> bool:
    if rollout.state is RolloutState.RUNNING:
        return True
    try:
        return load_policy(rollout.policy).promotion.route_by_load
    except InvalidPolicy:
        return False  # a row stored before a validation rule existed: routed baseline only


def _acts(rollout: Rollout, policy: Policy, action: Action) -> bool:
    """Whether the gate applies `action`: on a running rollout as the policy allows; on
    one promoted and routed by load only a kill (the rollback to the baseline)."""
    if rollout.state is RolloutState.PROMOTED:
        by_load = policy.promotion.route_by_load
        return by_load and action is Action.KILL and policy.auto_kill
    return rollout.state is RolloutState.RUNNING and _allowed(policy, action)


def _allowed(policy: Policy, action: Action) -> bool:
    return policy.auto_kill if action is Action.KILL else True
