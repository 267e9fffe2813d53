"""Feedback and health."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import JSONResponse

from gate.api.deps import Operator, ServicesDep, SessionDep
from gate.api.schemas import FeedbackIn, FeedbackOut
from gate.feedback import service as feedback
from gate.health import database_health, redis_health

router = APIRouter(tags=["feedback", "health"])


@router.post("/v1/feedback", response_model=FeedbackOut, status_code=201)
def post_feedback(body: FeedbackIn, db: SessionDep, _: Operator) -> FeedbackOut:
    """Record a user's thumbs, score or escalation against the answer they saw."""
    row = feedback.record(db, **body.model_dump())
    return FeedbackOut.model_validate(row)


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(svc: ServicesDep) -> JSONResponse:
    """Readiness: the database answers, and Redis when configured."""
    parts = (database_health(svc.sessions.kw["bind"]), redis_health(svc.settings.redis_url))
    checks = {part.name: "ok" if part.ok else part.detail for part in parts}
    ready = all(value == "ok" for value in checks.values())
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)
