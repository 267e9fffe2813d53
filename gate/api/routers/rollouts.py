"""Routes, rollouts, their state changes (kill switch included), verdicts and audit."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from sqlalchemy import select

from gate.api.deps import Admin, Operator, Reader, ServicesDep, SessionDep, require
from gate.api.idempotency import KeyHeader, run_once
from gate.api.schemas import (
    ArmAdd,
    AuditOut,
    KillAll,
    Reason,
    RolloutOut,
    RolloutPatch,
    RouteOut,
    VerdictOut,
)
from gate.db.models import AuditEvent, Route, Verdict
from gate.keys.service import Principal, Scope
from gate.rollouts import repository, routes, service
from gate.rollouts.schemas import RolloutIn, RouteIn
from gate.rollouts.states import Action
from gate.routing import service as routing

router = APIRouter(prefix="/v1", tags=["rollouts"])
# Ids are 32-bit columns: larger values are a 422, not a driver overflow.
RolloutId = Annotated[int, Path(ge=1, le=2**31 - 1)]
OptionalId = Annotated[int | None, Query(ge=1, le=2**31 - 1)]


@router.get("/routes", response_model=list[RouteOut])
def list_routes(db: SessionDep, _: Reader) -> list[Route]:
    """List routes."""
    return list(db.scalars(select(Route).order_by(Route.id)))


@router.post(
    "/routes",
    response_model=RouteOut,
    status_code=201,
    responses={200: {"model": RouteOut, "description": "Already registered with this spec."}},
)
def create_route(
    request: Request,
    spec: RouteIn,
    db: SessionDep,
    who: Admin,
    response: Response,
    key: KeyHeader = None,
) -> dict[str, Any]:
    """Register a route: 201 when created, 200 when the same spec is already there, 409 when
    another spec holds the name."""

    def work() -> dict[str, Any]:
        route, done = routes.register_route(db, spec=spec, actor=who.actor)
        if done is not routes.Registered.CREATED:
            response.status_code = 200
        return RouteOut.model_validate(route).model_dump(mode="json")

    return run_once(db, key=key, actor=who.actor, request=request, body=spec, work=work)


@router.delete("/routes/{name}", status_code=204, response_class=Response)
def remove_route(name: Annotated[str, Path(max_length=128)], db: SessionDep, who: Admin) -> None:
    """Remove a route that no rollout uses (409 while one does)."""
    routes.remove_route(db, name=name, actor=who.actor)


@router.get("/rollouts", response_model=list[RolloutOut])
def list_rollouts(db: SessionDep, _: Reader) -> list[RolloutOut]:
    """List rollouts, newest first."""
    return [RolloutOut.model_validate(r) for r in repository.list_rollouts(db)]


@router.post("/rollouts", response_model=RolloutOut, status_code=201)
def create_rollout(
    request: Request, spec: RolloutIn, db: SessionDep, who: Admin, key: KeyHeader = None
) -> dict[str, Any]:
    """Create a pending rollout."""

    def work() -> dict[str, Any]:
        rollout = service.create_rollout(db, spec=spec, actor=who.actor)
        return RolloutOut.model_validate(rollout).model_dump(mode="json")

    return run_once(db, key=key, actor=who.actor, request=request, body=spec, work=work)


@router.get("/rollouts/{rollout_id}", response_model=RolloutOut)
def get_rollout(rollout_id: RolloutId, db: SessionDep, _: Reader) -> RolloutOut:
    """Show one rollout."""
    return RolloutOut.model_validate(service.get_rollout(db, rollout_id=rollout_id))


@router.patch("/rollouts/{rollout_id}", response_model=RolloutOut)
def update_rollout(
    rollout_id: RolloutId, patch: RolloutPatch, db: SessionDep, who: Admin
) -> RolloutOut:
    """Change sample rate, mode or policy; a stale `version` gets 409."""
    changes = patch.model_dump(exclude_unset=True, exclude={"version"}, exclude_none=True)
    rollout = service.update_rollout(
        db, rollout_id=rollout_id, expected_version=patch.version, actor=who.actor, **changes
    )
    return RolloutOut.model_validate(rollout)


def _act(
    request: Request,
    action: Action,
    rollout_id: RolloutId,
    body: Reason,
    who: Principal,
    db: SessionDep,
    svc: ServicesDep,
    key: str | None,
) -> RolloutOut:
    def work() -> dict[str, object]:
        rollout = routing.change_state(
            db,
            rollout_id=rollout_id,
            action=action,
            actor=who.actor,
            reason=body.reason,
            publisher=svc.publisher,
            expected_version=body.version,
        )
        return RolloutOut.model_validate(rollout).model_dump(mode="json")

    answer = run_once(db, key=key, actor=who.actor, request=request, body=body, work=work)
    return RolloutOut.model_validate(answer)


# action -> (scope needed, what it does); kill, hold and resume are an operator's.
ACTIONS = {
    Action.START: (Scope.ADMIN, "Start a pending rollout: mirroring or canary traffic begins."),
    Action.KILL: (Scope.OPERATE, "Kill a rollout: every gateway serves the baseline only."),
    Action.HOLD: (Scope.OPERATE, "Hold a running rollout: baseline only, data kept."),
    Action.RESUME: (Scope.OPERATE, "Resume a held or killed rollout."),
    Action.PROMOTE: (Scope.ADMIN, "Advance to the next stage, or promote on the last one."),
}


def _register(action: Action, scope: Scope, summary: str) -> None:
    def endpoint(
        request: Request,
        rollout_id: RolloutId,
        body: Reason,
        db: SessionDep,
        svc: ServicesDep,
        key: KeyHeader = None,
        who: Principal = Depends(require(scope)),  # noqa: B008 (FastAPI's dependency idiom)
    ) -> RolloutOut:
        return _act(request, action, rollout_id, body, who, db, svc, key)

    router.add_api_route(
        f"/rollouts/{{rollout_id}}/{action.value}",
        endpoint,
        methods=["POST"],
        response_model=RolloutOut,
        name=f"{action.value}_rollout",
        summary=summary,
    )


for _action, (_scope, _summary) in ACTIONS.items():
    _register(_action, _scope, _summary)


ArmName = Annotated[str, Path(max_length=64)]


@router.post("/rollouts/{rollout_id}/arms", response_model=RolloutOut, status_code=201)
def add_arm(
    request: Request,
    rollout_id: RolloutId,
    body: ArmAdd,
    db: SessionDep,
    svc: ServicesDep,
    who: Admin,
    key: KeyHeader = None,
) -> dict[str, Any]:
    """Add an arm to a live rollout with arms: mirrored to from the next sampled request."""

    def work() -> dict[str, Any]:
        rollout = routing.add_arm(
            db,
            rollout_id=rollout_id,
            spec=body,
            actor=who.actor,
            reason=body.reason,
            publisher=svc.publisher,
        )
        return RolloutOut.model_validate(rollout).model_dump(mode="json")

    return run_once(db, key=key, actor=who.actor, request=request, body=body, work=work)


@router.post("/rollouts/{rollout_id}/arms/{name}/kill", response_model=RolloutOut)
def kill_arm(
    request: Request,
    rollout_id: RolloutId,
    name: ArmName,
    body: Reason,
    db: SessionDep,
    svc: ServicesDep,
    who: Operator,
    key: KeyHeader = None,
) -> dict[str, Any]:
    """Kill one arm: no more mirroring to it, the other arms go on (409 for the last one)."""

    def work() -> dict[str, Any]:
        rollout = routing.kill_arm(
            db,
            rollout_id=rollout_id,
            name=name,
            actor=who.actor,
            reason=body.reason,
            publisher=svc.publisher,
        )
        return RolloutOut.model_validate(rollout).model_dump(mode="json")

    return run_once(db, key=key, actor=who.actor, request=request, body=body, work=work)


@router.post("/kill", response_model=list[RolloutOut])
def kill_everything(
    request: Request,
    body: KillAll,
    db: SessionDep,
    svc: ServicesDep,
    who: Operator,
    key: KeyHeader = None,
) -> list[dict[str, Any]]:
    """Global kill: every rollout to its baseline at once."""

    def work() -> list[dict[str, Any]]:
        killed = routing.kill_all(db, actor=who.actor, reason=body.reason, publisher=svc.publisher)
        return [RolloutOut.model_validate(r).model_dump(mode="json") for r in killed]

    return run_once(db, key=key, actor=who.actor, request=request, body=body, work=work)


@router.get("/rollouts/{rollout_id}/verdicts", response_model=list[VerdictOut])
def verdicts(
    rollout_id: RolloutId,
    db: SessionDep,
    _: Reader,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[Verdict]:
    """Verdict history, newest first."""
    service.get_rollout(db, rollout_id=rollout_id)
    statement = (
        select(Verdict)
        .where(Verdict.rollout_id == rollout_id)
        .order_by(Verdict.id.desc())
        .limit(limit)
    )
    return list(db.scalars(statement))


@router.get("/audit", response_model=list[AuditOut])
def audit_trail(
    db: SessionDep,
    _: Reader,
    rollout_id: OptionalId = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[AuditEvent]:
    """Audit events (who, what, why, when), newest first."""
    statement = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)
    if rollout_id is not None:
        statement = statement.where(AuditEvent.rollout_id == rollout_id)
    return list(db.scalars(statement))
