"""Kubernetes controllers: the analysis endpoint, controller links, Flagger and Argo hooks."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.responses import JSONResponse

from gate.api.deps import Admin, Operator, Reader, ServicesDep, session
from gate.controllers import links
from gate.controllers.analysis import AnalysisOut, analysis
from gate.controllers.hooks import (
    ArgoNotification,
    FlaggerHook,
    FlaggerPayload,
    answer_argo,
    answer_flagger,
)
from gate.controllers.probe import route_problem
from gate.controllers.targets import Target, notes
from gate.db.models import ControllerKind, Rollout
from gate.errors import BadRequest, Conflict, NotFound
from gate.rollouts import service

router = APIRouter(prefix="/v1", tags=["controllers"])
# The commit runs before the answer is sent: a controller acts on a 2xx at once (a kill it
# reported, a rollout a hook started), so the answer must be a committed change.
SessionDep = Annotated[Session, Depends(session, scope="function")]
RolloutId = Annotated[int, Path(ge=1, le=2**31 - 1)]
Token = Annotated[str, Path(min_length=8, max_length=128, description="The rollout's hook token.")]


class LinkIn(BaseModel):
    controller: ControllerKind
    poll_interval_s: float = Field(60.0, ge=1.0, le=86_400.0, description="The analysis interval.")
    missed_polls: int = Field(5, ge=1, le=1000, description="Missed check-ins before a hold.")
    analysis_key: str | None = Field(
        None,
        max_length=128,
        description="Name of the API key the controller polls the analysis with (required for"
        " argo-rollouts): only its polls are check-ins.",
    )
    target: Target | None = Field(
        None, description="k8s-traffic only: the HTTPRoute or LLMInferenceService pair to drive."
    )


class LinkOut(BaseModel):
    rollout_id: int
    controller: ControllerKind
    poll_interval_s: float
    missed_polls: int
    analysis_key: str | None
    hook_token: str | None = Field(description="Flagger only; shown once, store it in a Secret.")
    target: dict[str, Any] | None = None
    notes: list[str] = Field(default_factory=list, description="What specgate cannot do there.")


class HookOut(BaseModel):
    ok: bool
    detail: str


@router.get("/rollouts/{rollout_id}/analysis", response_model=AnalysisOut)
def rollout_analysis(
    rollout_id: RolloutId, db: SessionDep, svc: ServicesDep, who: Reader
) -> AnalysisOut:
    """The gate's decision for a controller (Argo Rollouts `web` metric).

    A poll with the link's analysis key is the controller's check-in.
    """
    rollout = service.get_rollout(db, rollout_id=rollout_id)
    links.poll(db, rollout_id=rollout.id, key=who.name, publisher=svc.publisher)
    return analysis(db, rollout=rollout)


@router.get("/analysis", response_model=AnalysisOut)
def analysis_by_reference(
    db: SessionDep,
    svc: ServicesDep,
    who: Reader,
    alias: Annotated[str | None, Query(max_length=256)] = None,
    name: Annotated[str | None, Query(max_length=128)] = None,
) -> AnalysisOut:
    """The same document for the newest rollout of an alias, or a rollout by name."""
    if (alias is None) == (name is None):
        raise BadRequest("give exactly one of alias or name")
    column = Rollout.alias if alias is not None else Rollout.name
    rollout = db.scalars(
        select(Rollout).where(column == (alias or name)).order_by(Rollout.id.desc()).limit(1)
    ).first()
    if rollout is None:
        raise NotFound(f"no rollout for {'alias' if alias else 'name'} {alias or name!r}")
    links.poll(db, rollout_id=rollout.id, key=who.name, publisher=svc.publisher)
    return analysis(db, rollout=rollout)


@router.post("/rollouts/{rollout_id}/controller", response_model=LinkOut)
def link_controller(
    rollout_id: RolloutId, body: LinkIn, db: SessionDep, svc: ServicesDep, who: Admin
) -> LinkOut:
    """Tie a rollout to Argo Rollouts, Flagger, or its traffic objects (k8s-traffic); for
    Flagger, issue a new hook token."""
    link, token = links.link_rollout(
        db,
        rollout_id=rollout_id,
        controller=body.controller,
        poll_interval_s=body.poll_interval_s,
        missed_polls=body.missed_polls,
        analysis_key=body.analysis_key,
        secret_key=svc.settings.secret_key.get_secret_value(),
        actor=who.actor,
        target=body.target,
    )
    return LinkOut(
        rollout_id=link.rollout_id,
        controller=link.controller,
        poll_interval_s=link.poll_interval_s,
        missed_polls=link.missed_polls,
        analysis_key=link.analysis_key,
        hook_token=token,
        target=link.target,
        notes=notes(body.target) if body.target else [],
    )


@router.post(
    "/hooks/flagger/{hook}/{token}",
    response_model=HookOut,
    responses={
        409: {"model": HookOut, "description": "Not now: Flagger waits or counts a failure."}
    },
)
def flagger_hook(
    hook: FlaggerHook, token: Token, payload: FlaggerPayload, db: SessionDep, svc: ServicesDep
) -> JSONResponse:
    """A Flagger webhook: 2xx means go on (for `rollback`: roll back now)."""
    link = links.by_token(db, token=token, secret_key=svc.settings.secret_key.get_secret_value())
    rollout = service.get_rollout(db, rollout_id=link.rollout_id)
    named = str(payload.metadata.get("rollout", rollout.name))
    if named != rollout.name:
        raise Conflict(f"this token belongs to rollout {rollout.name!r}, not {named!r}")
    links.check_in(db, link=link, publisher=svc.publisher)
    got = answer_flagger(
        db,
        link=link,
        rollout=rollout,
        hook=hook,
        payload=payload,
        publisher=svc.publisher,
        probe=route_problem,
    )
    return JSONResponse({"ok": got.ok, "detail": got.detail}, status_code=200 if got.ok else 409)


@router.post("/hooks/argo-rollouts", response_model=HookOut)
def argo_notification(
    note: ArgoNotification, db: SessionDep, svc: ServicesDep, who: Operator
) -> HookOut:
    """An Argo Rollouts notification: `on-rollout-aborted` kills, `-completed` ends mirroring."""
    rollout = db.scalars(select(Rollout).where(Rollout.name == note.rollout)).first()
    if rollout is None:
        raise NotFound(f"rollout {note.rollout!r} not found")
    got = answer_argo(db, rollout=rollout, note=note, actor=who.actor, publisher=svc.publisher)
    return HookOut(ok=got.ok, detail=got.detail)
