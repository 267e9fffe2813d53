"""JSON series behind the dashboard's table and charts (read scope)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel

from gate.api.deps import Reader, SessionDep
from gate.api.schemas import IsoTime
from gate.db.base import utcnow
from gate.errors import BadRequest
from gate.reports import dashboard, glance, guardrails
from gate.rollouts import service

router = APIRouter(prefix="/v1", tags=["dashboard"])
RolloutId = Annotated[int, Path(ge=1, le=2**31 - 1)]
MAX_WINDOW = timedelta(days=92)
# A rollout younger than this is still drawn over this much time, so points have room.
MIN_LIFETIME = timedelta(minutes=15)


class Me(BaseModel):
    """The calling key: its name and scopes (the page disables what it cannot do)."""

    name: str
    scopes: list[str]


@router.get("/whoami", response_model=Me)
def whoami(principal: Reader) -> Me:
    """Return the calling key's name and scopes."""
    return Me(name=principal.name, scopes=sorted(s.value for s in principal.scopes))


@router.get("/dashboard/rollouts", response_model=list[dashboard.RolloutRow])
def rollouts(db: SessionDep, _: Reader) -> list[dashboard.RolloutRow]:
    """Rollouts, newest first, with their routes and latest verdict."""
    return dashboard.overview(db)


@router.get("/guardrails", response_model=list[guardrails.GuardrailInfo])
def guardrail_list(_: Reader) -> list[guardrails.GuardrailInfo]:
    """The gate's guardrails as declared in its registry (what /ui and the report list)."""
    return guardrails.declared()


@router.get("/rollouts/{rollout_id}/dashboard", response_model=dashboard.RolloutDashboard)
def rollout_series(
    rollout_id: RolloutId,
    db: SessionDep,
    _: Reader,
    hours: Annotated[float | None, Query(gt=0, le=MAX_WINDOW.days * 24)] = None,
    until: IsoTime | None = None,
) -> dashboard.RolloutDashboard:
    """Latency, acceptance, pass rates, failures and verdicts over the last `hours`
    (by default, the rollout's lifetime)."""
    rollout = service.get_rollout(db, rollout_id=rollout_id)
    end = until or utcnow()
    if end.tzinfo is None:
        raise BadRequest("give `until` with a timezone, e.g. 2026-11-20T12:00:00Z")
    if hours is None:
        seen = dashboard.first_seen(db, rollout_id=rollout.id)
        born = min(t for t in (rollout.started_at, rollout.created_at, seen) if t is not None)
        lifetime = min(max(end - born, MIN_LIFETIME), MAX_WINDOW)
        since = end - lifetime * 1.05  # a little room before the first point
    else:
        since = end - timedelta(hours=hours)
    return dashboard.rollout_dashboard(db, rollout_id=rollout_id, since=since, until=end)


@router.get("/rollouts/{rollout_id}/glance", response_model=glance.Glance)
def rollout_glance(rollout_id: RolloutId, db: SessionDep, _: Reader) -> glance.Glance:
    """The answer at a glance: headline, reasons in words and the guardrail x segment grid."""
    rollout = service.get_rollout(db, rollout_id=rollout_id)
    return glance.latest(db, rollout=rollout)
