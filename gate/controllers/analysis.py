"""The analysis document controllers read: a small, stable summary of the gate's verdict.

It is built for Argo Rollouts' `web` metric provider: `jsonPath: "{$.decision}"` with
`successCondition: result == "promote"` and `failureCondition: result == "kill"`, so that
while the gate says continue (or hold) neither condition holds and the measurement is
Inconclusive. The rollout's state wins over the last verdict: a rollout killed by a person
reads `kill` even when its last verdict said continue.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from gate.db.base import utcnow
from gate.db.enums import Decision, RolloutState
from gate.db.models import Rollout, Verdict
from gate.stats.policy import ALL, load_policy

SCHEMA = "specgate.analysis/v1"
BY_STATE = {
    RolloutState.KILLED: Decision.KILL,
    RolloutState.HELD: Decision.HOLD,
    RolloutState.PROMOTED: Decision.PROMOTE,
}
ESTIMATE_FIELDS = ("metric", "estimate", "lower", "upper", "kill_at", "margin", "status", "n")


class Pairs(BaseModel):
    seen: int = Field(description="Tested pairs in the current stage at the last verdict.")
    needed: int = Field(description="The policy's minimum pairs before a promotion.")


class Estimate(BaseModel):
    metric: str
    estimate: float | None
    lower: float | None
    upper: float | None
    kill_at: float | None
    margin: float | None
    status: str
    n: int


class AnalysisOut(BaseModel):
    """What a controller needs to decide: stable field names, versioned by `schema`."""

    schema_: str = Field(SCHEMA, alias="schema")
    rollout_id: int
    rollout: str
    alias: str
    state: RolloutState
    stage: int
    decision: Decision
    proven_better: bool = Field(description="The gain is proven and every guardrail is inside.")
    harmful: bool = Field(description="The gate proved harm (its verdict was kill).")
    inconclusive: bool = Field(description="Neither yet: the gate says continue or hold.")
    killed: bool = Field(description="The rollout is killed in specgate (gate or person).")
    reason_codes: list[str]
    summary: str
    pairs: Pairs
    estimates: list[Estimate] = Field(description="Pooled (segment 'all') cells of the verdict.")
    policy_version: str = Field(description="Digest of the effective gate policy.")
    verdict_at: datetime | None
    checked_at: datetime


def policy_version(policy: dict[str, Any]) -> str:
    """Return a short digest of the effective policy (defaults filled in)."""
    effective = load_policy(policy).model_dump(mode="json")
    text = json.dumps(effective, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def latest_verdict(session: Session, rollout: Rollout) -> Verdict | None:
    """Return the newest verdict on the rollout's current stage."""
    statement = (
        select(Verdict)
        .where(Verdict.rollout_id == rollout.id, Verdict.stage == rollout.stage)
        .order_by(Verdict.id.desc())
        .limit(1)
    )
    return session.scalars(statement).first()


def decision_of(rollout: Rollout, verdict: Verdict | None) -> Decision:
    """Return what the controller should do: the state's meaning, else the last verdict's."""
    if rollout.state in BY_STATE:
        return BY_STATE[rollout.state]
    if rollout.state is not RolloutState.RUNNING or verdict is None:
        return Decision.CONTINUE
    # With `auto_kill: false` a person decides on proven harm: the controller must not
    # abort on its own either, so it reads hold (Inconclusive) until someone kills.
    if verdict.decision is Decision.KILL and not load_policy(rollout.policy).auto_kill:
        return Decision.HOLD
    return verdict.decision


def analysis(session: Session, *, rollout: Rollout) -> AnalysisOut:
    """Build the analysis document of one rollout."""
    verdict = latest_verdict(session, rollout)
    decision = decision_of(rollout, verdict)
    harmful = verdict is not None and verdict.decision is Decision.KILL
    return AnalysisOut(
        rollout_id=rollout.id,
        rollout=rollout.name,
        alias=rollout.alias,
        state=rollout.state,
        stage=rollout.stage,
        decision=decision,
        proven_better=decision is Decision.PROMOTE,
        harmful=harmful,
        inconclusive=decision in (Decision.CONTINUE, Decision.HOLD),
        killed=rollout.state is RolloutState.KILLED,
        reason_codes=list(verdict.reason_codes) if verdict else ["no_verdict"],
        summary=verdict.summary if verdict else "no verdict on this stage yet",
        pairs=Pairs(
            seen=verdict.n_pairs if verdict else 0, needed=load_policy(rollout.policy).min_pairs
        ),
        estimates=[
            _estimate(cell)
            for cell in (verdict.estimates if verdict else [])
            if cell.get("segment") == ALL
        ],
        policy_version=policy_version(rollout.policy),
        verdict_at=verdict.created_at if verdict else None,
        checked_at=utcnow(),
    )


def _estimate(cell: dict[str, Any]) -> Estimate:
    return Estimate(**{name: cell.get(name) for name in ESTIMATE_FIELDS})
