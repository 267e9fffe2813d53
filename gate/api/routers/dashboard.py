"""JSON series behind the dashboard's table and charts (read scope)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Path, Query

from gate.api.deps import Reader, SessionDep
from gate.api.schemas import IsoTime
from gate.db.base import utcnow
from gate.errors import BadRequest
from gate.reports import dashboard, guardrails
from gate.rollouts import service

router = APIRouter(prefix="/v1", tags=["dashboard"])
RolloutId = Annotated[int, Path(ge=1, le=2**31 - 1)]
MAX_WINDOW = timedelta(days=92)


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
    hours: Annotated[float, Query(gt=0, le=MAX_WINDOW.days * 24)] = 24,
    until: IsoTime | None = None,
) -> dashboard.RolloutDashboard:
    """Latency, acceptance, pass rates, failures and verdicts over the last `hours`."""
    service.get_rollout(db, rollout_id=rollout_id)
    end = until or utcnow()
    if end.tzinfo is None:
        raise BadRequest("give `until` with a timezone, e.g. 2026-11-20T12:00:00Z")
    since = end - timedelta(hours=hours)
    return dashboard.rollout_dashboard(db, rollout_id=rollout_id, since=since, until=end)
