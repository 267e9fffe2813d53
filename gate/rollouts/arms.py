"""Arms: the candidate routes of a rollout with several. The caller owns the transaction.

An arm is added or killed on its own, audited with its reason; the rollout's state is
left as it is (the audit events name no state, so the rollout's last change stays the
one that put it where it is). Each change bumps the rollout's version, so gateways that
read the routing state learn the new set of arms.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from gate import audit
from gate.db.base import utcnow
from gate.db.enums import ArmState, Decision, RolloutState, RouteRole
from gate.db.models import Rollout, RolloutArm, Route, Verdict
from gate.errors import BadRequest, Conflict, NotFound, StaleVersion
from gate.rollouts import repository
from gate.rollouts.schemas import MAX_ARMS, ArmIn
from gate.stats.arms import ahead_of, stage_weights
from gate.stats.policy import load_policy

_FINISHED = (RolloutState.KILLED, RolloutState.PROMOTED)


def new_arms(session: Session, arms: list[ArmIn]) -> list[RolloutArm]:
    """Return the arm rows of a rollout being created (their routes checked)."""
    rows = []
    for arm in arms:
        route = route_in_role(session, arm.route, RouteRole.CANDIDATE)
        rows.append(RolloutArm(name=arm.name, route_id=route.id))
    return rows


def route_in_role(session: Session, name: str, role: RouteRole) -> Route:
    """Return the route called `name` in `role`, or raise BadRequest."""
    route = repository.get_route_by_name(session, name)
    if route is None:
        raise BadRequest(f"route {name!r} does not exist")
    if route.role is not role:
        raise BadRequest(f"route {name!r} is a {route.role.value} route, not a {role.value} one")
    return route


def add_arm(session: Session, *, rollout_id: int, spec: ArmIn, actor: str, reason: str) -> Rollout:
    """Add an arm to a live rollout with arms; it is mirrored to from the next request."""
    rollout = _locked(session, rollout_id)
    if not rollout.arms:
        raise Conflict(
            f"rollout {rollout.id} has one candidate, not arms: create a rollout with arms "
            "to compare several"
        )
    if rollout.state in _FINISHED:
        raise Conflict(f"cannot add an arm to a rollout that is {rollout.state.value}")
    if len(rollout.arms) >= MAX_ARMS:
        raise Conflict(f"rollout {rollout.id} already has {MAX_ARMS} arms, the most it may")
    route = route_in_role(session, spec.route, RouteRole.CANDIDATE)
    for arm in rollout.arms:
        if arm.name == spec.name or arm.route_id == route.id:
            raise Conflict(f"rollout {rollout.id} already has arm {arm.name!r} ({arm.route.name})")
    rollout.arms.append(RolloutArm(name=spec.name, route_id=route.id))
    _changed(session, rollout, actor=actor, action="arm.add", reason=reason, arm=spec.name)
    return rollout


def kill_arm(session: Session, *, rollout_id: int, name: str, actor: str, reason: str) -> Rollout:
    """Stop mirroring to one arm, for a reason; the other arms go on (a no-op when killed)."""
    rollout = _locked(session, rollout_id)
    arm = next((a for a in rollout.arms if a.name == name), None)
    if arm is None:
        raise NotFound(f"rollout {rollout.id} has no arm {name!r}")
    if arm.state is ArmState.KILLED:
        return rollout
    if not any(a.state is ArmState.ACTIVE for a in rollout.arms if a is not arm):
        raise Conflict(f"arm {name!r} is the last active arm: kill the rollout instead")
    arm.state, arm.killed_at = ArmState.KILLED, utcnow()
    _changed(session, rollout, actor=actor, action="arm.kill", reason=reason, arm=name)
    return rollout


def check_promotable(session: Session, rollout: Rollout, *, actor: str) -> None:
    """Make the winning arm the rollout's candidate before a final promotion: the one
    active arm, or the winner of the newest verdict on this stage, the other active arms
    retired (killed, audited); refuse while several are active and none has won."""
    if not rollout.arms:
        return
    active = [a for a in rollout.arms if a.state is ArmState.ACTIVE]
    winner = _winner(session, rollout) if len(active) > 1 else None
    for arm in active if winner in {a.name for a in active} else []:
        if arm.name != winner:
            reason = f"retired at the final promotion: arm {winner!r} won the best-arm choice"
            kill_arm(session, rollout_id=rollout.id, name=arm.name, actor=actor, reason=reason)
    active = [a for a in rollout.arms if a.state is ArmState.ACTIVE]
    if len(active) != 1:
        names = ", ".join(a.name for a in active)
        raise Conflict(f"{len(active)} arms are active ({names}) and no verdict on this stage "
                       "names a winner: kill all but the winner first")  # fmt: skip
    rollout.candidate_route_id = active[0].route_id


def _winner(session: Session, rollout: Rollout) -> str | None:
    """Return the arm the newest verdict on the rollout's stage promotes (None: none)."""
    newest = _newest(session, rollout)
    if newest is None or newest.decision is not Decision.PROMOTE or not newest.arms:
        return None
    winner = newest.arms.get("winner")
    return winner if isinstance(winner, str) else None


def _newest(session: Session, rollout: Rollout) -> Verdict | None:
    """Return the newest verdict on the rollout's current stage."""
    return session.scalars(
        select(Verdict)
        .where(Verdict.rollout_id == rollout.id, Verdict.stage == rollout.stage)
        .order_by(Verdict.created_at.desc(), Verdict.id.desc())
        .limit(1)
    ).first()


def reallocate(session: Session, rollout: Rollout, *, actor: str) -> None:
    """At a stage boundary (before the stage moves on), set each active arm's weight for
    the next stage from the newest verdict's choice on this one, and audit the weights
    and why: an arm proven behind another live arm gets `arms.behind_weight`, the others
    1 (`gate.stats.arms.stage_weights`). Nothing when the policy does not reallocate."""
    policy = load_policy(rollout.policy).arms
    if not rollout.arms or not policy.reallocate:
        return
    active = {a.name: a for a in rollout.arms if a.state is ArmState.ACTIVE}
    newest = _newest(session, rollout)
    judged = {a["arm"]: a for a in (newest.arms or {}).get("arms", [])} if newest else {}
    live = {name: _interval(judged[name]) for name in active
            if name in judged and judged[name]["state"] not in _OUT}  # fmt: skip
    ahead = ahead_of(live)
    weights = {name: 1.0 for name in active} | stage_weights(
        ahead, behind_weight=policy.behind_weight
    )
    behind = {name: by for name, by in ahead.items() if by}
    for name, arm in active.items():
        arm.weight = weights[name]
    audit.record(
        session,
        actor=actor,
        action="arm.reallocate",
        reason=_why(behind, policy.behind_weight),
        rollout_id=rollout.id,
        details={
            "stage": rollout.stage + 1,
            "verdict_id": newest.id if newest else None,
            "weights": weights,
            "behind": behind,
        },
    )


# An arm in these states at the look is out of the choice: it cannot hold another back.
_OUT = ("killed", "waiting")


def _interval(arm: dict[str, Any]) -> tuple[float | None, float | None]:
    lower, upper = arm.get("interval") or (None, None)
    return lower, upper


def _why(behind: dict[str, list[str]], weight: float) -> str:
    if not behind:
        return "no arm is proven behind another live arm: equal shares"
    said = "; ".join(f"arm {name!r} is proven behind {', '.join(repr(o) for o in by)}"
                     for name, by in behind.items())  # fmt: skip
    return f"{said}: weight {weight:g} for the next stage"


def _locked(session: Session, rollout_id: int) -> Rollout:
    rollout = repository.get_rollout(session, rollout_id, for_update=True)
    if rollout is None:
        raise NotFound(f"rollout {rollout_id} not found")
    return rollout


def _changed(
    session: Session, rollout: Rollout, *, actor: str, action: str, reason: str, arm: str
) -> None:
    rollout.updated_at = utcnow()  # bumps `version`: gateways reload the arms
    route = next(a.route_id for a in rollout.arms if a.name == arm)
    audit.record(
        session,
        actor=actor,
        action=action,
        reason=reason,
        rollout_id=rollout.id,
        details={"arm": arm, "route_id": route, "stage": rollout.stage},
    )
    try:
        session.flush()
    except StaleDataError:
        raise StaleVersion("the rollout was changed concurrently; reload and retry") from None
