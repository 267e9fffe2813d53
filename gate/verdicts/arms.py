"""The periodic gate on a rollout with several candidates (issue 40): each arm judged on
its own pairs at its share of the alphas, the best arm chosen among the live ones, and the
acts (kill an arm on its own; at the final promotion, the winner becomes the candidate).

Each sampled episode goes to one arm by a hash of its key, never by outcomes
(`gate.gateway.sampling.choose_arm`), so each arm's pairs are a stream the gate's
single-candidate statistics judge validly on their own. The statistics are
`gate.stats.arms` at one look over the stage's evaluated pairs. On Postgres in shadow mode
each arm is folded like a stage of one candidate (`gate.verdicts.folds.fold_arm`: one
`gate_folds` state per rollout, stage and arm, over the arm's pairs and the control pairs),
so a look costs the new pairs; elsewhere (SQLite) the arms' pairs are replayed
(`gate.stats.arms_replay.replay_arms`). Both give the same choice (`test_paths_agree_arms`).
An arm killed before (by the gate or an operator) is out of the choice; its pairs stay out.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from gate.audit import GATE_ACTOR
from gate.db.enums import ArmState as StoredArm
from gate.db.enums import Decision, RolloutMode, RolloutState
from gate.db.models import Rollout
from gate.pairs.export import pair_records
from gate.routing import service as routing
from gate.routing.pubsub import Publisher
from gate.stats import fold_stats
from gate.stats.arms import ArmLooks, ArmState, ArmStream, arm_policy, arm_rows, choose
from gate.stats.arms_replay import (
    ArmResult,
    ArmsReplayResult,
    replay_arms,
    shown_arm,
    to_json,
)
from gate.stats.gate_stats import GateStats
from gate.stats.ids import ALL, Reason, ReasonKind
from gate.stats.incremental import Key
from gate.stats.policy import Policy, at_stage, load_tolerance, next_stage_share
from gate.stats.replay import replay
from gate.stats.rule import Code
from gate.stats.sequences import MeanStats
from gate.stats.verdict import DECISIONS, NO_PAIRS, VerdictResult, decide
from gate.verdicts import folds
from gate.verdicts.acceptance import ArmSums

CHOICE_OPEN = Reason(ReasonKind.ARM_CHOICE_OPEN).code
_CODES = {decision: code for code, decision in DECISIONS.items()}


def arm_records(session: Session, *, rollout: Rollout) -> dict[str, list[dict[str, Any]]]:
    """Return the current stage's evaluated pair records of each arm, in fold order; the
    control pairs (the baseline against itself, no arm) are in every arm's."""
    stage = list(
        pair_records(session, rollout_id=rollout.id, stage=rollout.stage, evaluated_only=True)
    )
    names = dict.fromkeys([arm.name for arm in rollout.arms])
    names.update(dict.fromkeys(r["arm"] for r in stage if r["arm"] is not None))
    # An episode's pairs in another arm before this one's mark it continued (`arm_rows`).
    return {name: arm_rows(stage, name) for name in names}


def arm_verdicts(session: Session, *, rollout: Rollout, policy: Policy) -> dict[str, VerdictResult]:
    """Return each arm's verdict on the rollout's current stage, its pairs alone, at the
    policy's full alphas (the single-candidate rule; `judge` spends each arm's share)."""
    matched = load_tolerance(policy, promoted=rollout.state is RolloutState.PROMOTED)
    verdicts = {}
    for arm, records in arm_records(session, rollout=rollout).items():
        if not records:
            verdicts[arm] = NO_PAIRS
            continue
        judged = replay(
            records,
            policy,
            every=len(records),
            mode=rollout.mode,
            stage=rollout.stage,
            load_match=matched,
        )
        verdicts[arm] = judged.verdict
    return verdicts


def judge(
    session: Session, *, rollout: Rollout, policy: Policy
) -> tuple[VerdictResult, dict[str, Any]]:
    """Return the rollout's verdict from its live arms' choice, and the choice as JSON."""
    live = [a.name for a in rollout.arms if a.state is StoredArm.ACTIVE]
    matched = load_tolerance(policy, promoted=rollout.state is RolloutState.PROMOTED)
    if folds.in_sql(session, mode=rollout.mode):
        got = _folded(session, rollout=rollout, policy=policy, live=live, matched=matched)
    else:
        got = _replayed(session, rollout=rollout, policy=policy, live=live, matched=matched)
    if got is None:
        return NO_PAIRS, {"winner": None, "leader": None, "arms": [], "waiting": sorted(live)}
    waiting = sorted(set(live) - {a.name for a in got.arms})
    return rollout_verdict(got), {**to_json(got), "waiting": waiting}


def _replayed(
    session: Session, *, rollout: Rollout, policy: Policy, live: list[str], matched: float | None
) -> ArmsReplayResult | None:
    """Return the live arms' choice by replaying the stage's pairs (SQLite, the fallback)."""
    records = [
        {**record, "arm": name}
        for name, rows in arm_records(session, rollout=rollout).items()
        if name in live
        for record in rows
    ]
    if not records:
        return None
    every = len(records)
    return replay_arms(records, policy, every=every, stage=rollout.stage, load_match=matched)


def _folded(
    session: Session, *, rollout: Rollout, policy: Policy, live: list[str], matched: float | None
) -> ArmsReplayResult | None:
    """Return the live arms' choice from each arm's fold state (Postgres, shadow): the same
    look `_replayed` takes, each arm's statistics from its stored sums plus the new pairs."""
    staged = at_stage(policy, rollout.stage)
    judged = arm_policy(staged)
    share = next_stage_share(policy, rollout.stage, RolloutMode.SHADOW)
    arms: list[_FoldedArm] = []
    order: dict[str, tuple[Key | None, int]] = {}
    for rank, name in enumerate(live):
        state, sums = folds.fold_arm(session, rollout_id=rollout.id, stage=rollout.stage,
                                     arm=name, policy=policy, load_match=matched)  # fmt: skip
        if state.pairs:
            rated = folds.feedback_sums(
                session, rollout_id=rollout.id, stage=rollout.stage, state=state,
                policy=policy, load_match=matched, arm=name,
            )  # fmt: skip
            stats = fold_stats.to_stats(state, judged, next_share=share, feedback=rated)
            # The arm's own gate, judged once (its intervals are most of a look's cost).
            verdict = decide(judged, stats)
            arms.append(_FoldedArm(name, state.pairs, stats, verdict, sums))
            order[name] = (sums.first, rank)
    if not arms:
        return None
    # Replay lists the arms in the order of their first pairs (ties: the rollout's order).
    arms.sort(key=lambda a: order[a.name])
    got = choose(staged, [_stream(judged, a) for a in arms])
    code = Code(int(got.code[0]))
    total = sum(a.pairs for a in arms)
    names = [a.name for a in arms]
    return ArmsReplayResult(
        decision=DECISIONS[code],
        pairs=total,
        decisive=code is not Code.CONTINUE,
        looks=1,
        total_pairs=total,
        winner=names[int(got.winner[0])] if got.winner[0] >= 0 else None,
        leader=names[int(got.leader[0])] if got.leader[0] >= 0 else None,
        arms=tuple(_result(got, k, arm) for k, arm in enumerate(arms)),
    )


@dataclass(frozen=True)
class _FoldedArm:
    """One arm at the look, from its fold state."""

    name: str
    pairs: int
    stats: GateStats
    verdict: VerdictResult  # its own gate's
    sums: ArmSums


def _stream(policy: Policy, arm: _FoldedArm) -> ArmStream:
    """Return an arm's gate code and primary statistics as a stream of one look."""
    pairs, code = np.array([arm.pairs]), np.array([_CODES[arm.verdict.decision]])
    cell = arm.stats.cells.get((policy.primary.metric, ALL))
    if not isinstance(cell, MeanStats):
        return ArmStream(pairs, code, MeanStats(np.zeros(1), 0.0, 0.0))
    one = {f.name: np.atleast_1d(np.asarray(getattr(cell, f.name), dtype=np.float64))
           for f in fields(cell)}  # fmt: skip
    return ArmStream(pairs, code, type(cell)(**one))


def _result(got: ArmLooks, k: int, arm: _FoldedArm) -> ArmResult:
    """Return arm `k` at the look, as replay's `arms_replay._result` builds it."""
    estimate = float(got.estimate[k, 0])
    return ArmResult(
        name=arm.name,
        state=ArmState(int(got.state[k, 0])),
        decision=arm.verdict.decision,
        pairs=arm.pairs,
        ratio=float(np.exp(estimate)) if np.isfinite(estimate) else None,
        lower=float(np.exp(got.lower[k, 0])),
        upper=float(np.exp(got.upper[k, 0])),
        verdict=arm.verdict,
        acceptance=arm.sums.acceptance.length(),
    )


def rollout_verdict(got: ArmsReplayResult) -> VerdictResult:
    """Return the rollout's verdict on the choice: the winner's (promote), every arm's kill
    reasons (kill), or the leader's estimates with the arms' reasons (hold, continue)."""
    judged = [a.name for a in got.arms if a.verdict is not None]
    shown = _arm(got, shown_arm(got.winner, got.leader, judged))
    base = shown.verdict if shown is not None and shown.verdict is not None else NO_PAIRS
    codes = [c for a in got.arms if a.decision is got.decision and a.verdict
             for c in a.verdict.reason_codes]  # fmt: skip
    if got.winner is not None:
        codes = list(base.reason_codes)
    if not codes:
        codes = [CHOICE_OPEN]
    return VerdictResult(
        decision=got.decision,
        reason_codes=tuple(dict.fromkeys(codes)),
        summary=_summary(got),
        cells=base.cells,
        n_pairs=sum(a.pairs for a in got.arms),
        bands=base.bands,
        n_episodes=base.n_episodes,
        unmatched=base.unmatched,
    )


def _arm(got: ArmsReplayResult, name: str | None) -> ArmResult | None:
    return next((a for a in got.arms if a.name == name), None)


def _summary(got: ArmsReplayResult) -> str:
    """Return the choice in words, then each arm's state and ratio."""
    if got.winner is not None:
        head = f"promote: arm {got.winner!r} is the best (or tied best) and its own gate promotes"
    elif got.decision is Decision.KILL:
        head = "kill: every arm's own gate killed it"
    elif got.decision is Decision.HOLD:
        head = "hold: every live arm's own gate holds"
    else:
        leader = f"arm {got.leader!r} leads" if got.leader else "no arm leads yet"
        head = f"continue: {leader}; no best-or-tied arm's own gate promotes yet"
    return f"{head}. Arms: " + "; ".join(_arm_words(a) for a in got.arms) + "."


def _arm_words(arm: ArmResult) -> str:
    ratio = "-" if arm.ratio is None else f"{arm.ratio:.3f} [{arm.lower:.3f}, {arm.upper:.3f}]"
    return f"{arm.name} {arm.state.name.lower()} ({arm.decision.value}, {arm.pairs} pairs, {ratio})"


def act(
    session: Session, *, rollout: Rollout, got: dict[str, Any], publisher: Publisher | None
) -> list[str]:
    """Kill on its own each live arm its gate killed while another arm lives; return them.

    When every arm is killed the rollout's verdict is a kill: the caller kills the rollout.
    """
    killed = [a for a in got["arms"] if a["state"] == ArmState.KILLED.name.lower()]
    live = {a.name for a in rollout.arms if a.state is StoredArm.ACTIVE}
    done = []
    for arm in killed:
        if arm["arm"] not in live or len(live) <= 1:
            continue
        routing.kill_arm(
            session,
            rollout_id=rollout.id,
            name=arm["arm"],
            actor=GATE_ACTOR,
            reason=f"{','.join(arm['reason_codes'])}: {arm['summary']}",
            publisher=publisher,
        )
        live.discard(arm["arm"])
        done.append(arm["arm"])
    return done
