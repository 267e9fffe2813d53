"""Rollout life cycle. The caller owns the transaction; every change is audited."""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from evaluators.registry import build_evaluators
from gate import audit
from gate.db.base import utcnow
from gate.db.enums import RolloutMode, RolloutState, RouteRole
from gate.db.models import Rollout, Route
from gate.errors import (
    BadRequest,
    ConfigError,
    Conflict,
    InvalidPolicy,
    InvalidTransition,
    NotFound,
    StaleVersion,
)
from gate.rollouts import arms, repository
from gate.rollouts.schemas import RolloutIn, RouteIn
from gate.rollouts.states import IDEMPOTENT, TRANSITIONS, Action, target_state
from gate.stats.policy import load_policy


def create_route(session: Session, *, spec: RouteIn, actor: str) -> Route:
    """Register a route."""
    if repository.get_route_by_name(session, spec.name) is not None:
        raise Conflict(f"route {spec.name!r} already exists")
    route = Route(
        name=spec.name,
        base_url=str(spec.base_url).rstrip("/"),
        model=spec.model,
        role=spec.role,
        metrics_url=str(spec.metrics_url) if spec.metrics_url else None,
        spec_method=spec.spec_method,
        spec_tokens=spec.spec_tokens,
        draft_model=spec.draft_model,
        spec_config=spec.spec_config,
        auth=spec.auth.model_dump() if spec.auth else None,
    )
    session.add(route)
    try:
        session.flush()
    except IntegrityError:
        raise Conflict(f"route {spec.name!r} already exists") from None
    audit.record(session, actor=actor, action="route.create", details={"route": spec.name})
    return route


def check_policy(policy: dict[str, Any]) -> None:
    """Refuse a bad policy: the gate's fields, and the evaluators it names with their options."""
    load_policy(policy)
    try:
        build_evaluators(policy)
    except ConfigError as exc:
        raise InvalidPolicy(f"invalid gate policy: evaluators: {exc.message}") from None


def create_rollout(session: Session, *, spec: RolloutIn, actor: str) -> Rollout:
    """Create a pending rollout of the candidate route (or arms) beside the baseline route."""
    baseline = arms.route_in_role(session, spec.baseline_route, RouteRole.BASELINE)
    rows = arms.new_arms(session, spec.arms or [])
    first = spec.candidate_route if spec.arms is None else spec.arms[0].route
    assert first is not None  # RolloutIn gives one or the other
    candidate = arms.route_in_role(session, first, RouteRole.CANDIDATE)
    check_policy(spec.policy)  # refuse a bad policy before anything is stored
    if repository.live_rollout_for_alias(session, spec.alias) is not None:
        raise Conflict(f"alias {spec.alias!r} already has a live rollout")
    rollout = Rollout(
        name=spec.name,
        alias=spec.alias,
        baseline_route_id=baseline.id,
        candidate_route_id=candidate.id,
        mode=spec.mode,
        sample_rate=spec.sample_rate,
        policy=spec.policy,
        state=RolloutState.PENDING,
        stage=0,
        arms=rows,
    )
    session.add(rollout)
    try:
        session.flush()
    except IntegrityError:
        raise Conflict(f"rollout {spec.name!r} already exists") from None
    audit.record(
        session,
        actor=actor,
        action="create",
        rollout_id=rollout.id,
        to_state="pending",
        details={"arms": [arm.name for arm in rows]} if rows else None,
    )
    return rollout


def get_rollout(session: Session, *, rollout_id: int) -> Rollout:
    """Return a rollout or raise NotFound."""
    rollout = repository.get_rollout(session, rollout_id)
    if rollout is None:
        raise NotFound(f"rollout {rollout_id} not found")
    return rollout


def transition(
    session: Session,
    *,
    rollout_id: int,
    action: Action,
    actor: str,
    reason: str,
    expected_version: int | None = None,
) -> Rollout:
    """Apply `action` to a rollout, or raise InvalidTransition / StaleVersion."""
    rollout = repository.get_rollout(session, rollout_id, for_update=True)
    if rollout is None:
        raise NotFound(f"rollout {rollout_id} not found")
    _check_version(rollout, expected_version)
    current = rollout.state
    if action in IDEMPOTENT and current is TRANSITIONS[action][1]:
        return rollout
    target = target_state(action, current)
    if target is None:
        raise InvalidTransition(f"cannot {action.value} a rollout that is {current.value}")
    if action is Action.PROMOTE and rollout.stage + 1 < len(stages(rollout)):
        return _advance_stage(session, rollout, actor=actor, reason=reason)
    if action is Action.PROMOTE:
        arms.check_promotable(session, rollout, actor=actor)
    _apply(rollout, target)
    audit.record(
        session,
        actor=actor,
        action=action.value,
        reason=reason,
        rollout_id=rollout.id,
        from_state=current.value,
        to_state=target.value,
        details={"stage": rollout.stage},
    )
    _flush(session)
    return rollout


def stages(rollout: Rollout) -> tuple[float, ...]:
    """Return the rollout's traffic stages (percent of its sample rate), from its policy."""
    return tuple(load_policy(rollout.policy).stages)


def _check_version(rollout: Rollout, expected: int | None) -> None:
    if expected is not None and expected != rollout.version:
        raise StaleVersion(f"rollout {rollout.id} is at version {rollout.version}, not {expected}")


def _apply(rollout: Rollout, target: RolloutState) -> None:
    now = utcnow()
    rollout.state = target
    if target is RolloutState.RUNNING and rollout.started_at is None:
        rollout.started_at = now
    rollout.ended_at = now if target in (RolloutState.PROMOTED, RolloutState.KILLED) else None


def _advance_stage(session: Session, rollout: Rollout, *, actor: str, reason: str) -> Rollout:
    arms.reallocate(session, rollout, actor=actor)  # from this stage's newest verdict
    rollout.stage += 1
    audit.record(
        session,
        actor=actor,
        action="advance",
        reason=reason,
        rollout_id=rollout.id,
        from_state=rollout.state.value,
        to_state=rollout.state.value,
        details={"stage": rollout.stage, "percent": stages(rollout)[rollout.stage]},
    )
    _flush(session)
    return rollout


def _flush(session: Session) -> None:
    try:
        session.flush()
    except StaleDataError:
        raise StaleVersion("the rollout was changed concurrently; reload and retry") from None


def update_rollout(
    session: Session, *, rollout_id: int, expected_version: int, actor: str, **changes: Any
) -> Rollout:
    """Change a rollout's mutable settings under optimistic concurrency."""
    rollout = get_rollout(session, rollout_id=rollout_id)
    _check_version(rollout, expected_version)
    allowed = {"sample_rate", "mode", "policy"}
    unknown = set(changes) - allowed
    if unknown:
        raise BadRequest(f"cannot update {', '.join(sorted(unknown))}")
    if "policy" in changes:
        check_policy(changes["policy"])
    if rollout.arms and changes.get("mode", RolloutMode.SHADOW) is not RolloutMode.SHADOW:
        raise BadRequest("a rollout with arms stays in shadow mode: arms are compared there")
    for field, value in changes.items():
        setattr(rollout, field, value)
    audit.record(
        session, actor=actor, action="update", rollout_id=rollout.id, details=_jsonable(changes)
    )
    _flush(session)
    return rollout


def _jsonable(changes: dict[str, Any]) -> dict[str, Any]:
    return {key: getattr(value, "value", value) for key, value in changes.items()}
