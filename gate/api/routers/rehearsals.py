"""A rollout's rehearsal: record the latest `specgate rehearse` summary, read it back."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from gate.api.deps import Admin, Reader, SessionDep
from gate.api.idempotency import KeyHeader, run_once
from gate.rehearse import service
from gate.rehearse.schemas import RehearsalIn
from gate.reports.rehearsal import RehearsalView, view

router = APIRouter(prefix="/v1", tags=["rollouts"])
RolloutId = Annotated[int, Path(ge=1, le=2**31 - 1)]


@router.post("/rollouts/{rollout_id}/rehearsals", response_model=RehearsalView, status_code=201)
def record_rehearsal(
    request: Request,
    rollout_id: RolloutId,
    summary: RehearsalIn,
    db: SessionDep,
    who: Admin,
    key: KeyHeader = None,
) -> dict[str, Any]:
    """Record a rehearsal (`rehearsal.json`) as the rollout's latest, replacing an older one."""

    def work() -> dict[str, Any]:
        row = service.record(db, rollout_id=rollout_id, rehearsal=summary, actor=who.actor)
        return view(row).model_dump(mode="json")

    return run_once(db, key=key, actor=who.actor, request=request, body=summary, work=work)


@router.get("/rollouts/{rollout_id}/rehearsal", response_model=RehearsalView)
def latest_rehearsal(rollout_id: RolloutId, db: SessionDep, _: Reader) -> RehearsalView:
    """The latest rehearsal recorded for the rollout (404 when none was)."""
    return view(service.latest(db, rollout_id=rollout_id))
