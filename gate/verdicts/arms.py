"""The periodic gate on a rollout with several candidates (issue 40): each arm judged on
its own pairs at its share of the alphas, the best arm chosen among the live ones, and the
acts (kill an arm on its own; at the final promotion, the winner becomes the candidate).

Each sampled episode goes to one arm by a hash of its key, never by outcomes
(`gate.gateway.sampling.choose_arm`), so each arm's pairs are a stream the gate's
single-candidate statistics judge validly on their own. The statistics are
`gate.stats.arms` through its replay (`gate.stats.arms_replay.replay_arms`), at one look
over the stage's evaluated pairs: the SQL fold keeps no per-arm state (`gate_folds` is
keyed by rollout and stage), so every arm is judged by replaying its pairs. An arm killed
before (by the gate or an operator) is out of the choice; its pairs stay out.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from gate.audit import GATE_ACTOR
from gate.db.enums import ArmState as StoredArm
from gate.db.enums import Decision, RolloutState
from gate.db.models import Rollout
from gate.pairs.export import pair_records
from gate.routing import service as routing
from gate.routing.pubsub import Publisher
from gate.stats.arms import ArmState
from gate.stats.arms_replay import ArmResult, ArmsReplayResult, replay_arms, to_json
from gate.stats.ids import Reason, ReasonKind
from gate.stats.policy import Policy, load_tolerance
from gate.stats.replay import replay
from gate.stats.verdict import NO_PAIRS, VerdictResult

CHOICE_OPEN = Reason(ReasonKind.ARM_CHOICE_OPEN).code


def arm_records(session: Session, *, rollout: Rollout) -> dict[str, list[dict[str, Any]]]:
    """Return the current stage's evaluated pair records of each arm, in fold order; the
    control pairs (the baseline against itself, no arm) are in every arm's."""
    by_arm: dict[str, list[dict[str, Any]]] = {arm.name: [] for arm in rollout.arms}
    stage = pair_records(session, rollout_id=rollout.id, stage=rollout.stage, evaluated_only=True)
    for record in stage:
        for name in list(by_arm) if record["arm"] is None else [record["arm"]]:
            by_arm.setdefault(name, []).append(record)
    return by_arm


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
    live = {a.name for a in rollout.arms if a.state is StoredArm.ACTIVE}
    records = [
        {**record, "arm": name}
        for name, rows in arm_records(session, rollout=rollout).items()
        if name in live
        for record in rows
    ]
    waiting = sorted(live - {r["arm"] for r in records})
    if not records:
        return NO_PAIRS, {"winner": None, "leader": None, "arms": [], "waiting": waiting}
    got = replay_arms(
        records,
        policy,
        every=len(records),
        stage=rollout.stage,
        load_match=load_tolerance(policy, promoted=rollout.state is RolloutState.PROMOTED),
    )
    return rollout_verdict(got), {**to_json(got), "waiting": waiting}


def rollout_verdict(got: ArmsReplayResult) -> VerdictResult:
    """Return the rollout's verdict on the choice: the winner's (promote), every arm's kill
    reasons (kill), or the leader's estimates with the arms' reasons (hold, continue)."""
    shown = _arm(got, got.winner or got.leader) or next(
        (a for a in got.arms if a.verdict is not None), None
    )
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
