"""Feedback and health."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from gate.api.deps import Operator, ServicesDep, SessionDep
from gate.api.idempotency import KeyHeader, run_once
from gate.api.schemas import FeedbackIn, FeedbackOut
from gate.feedback import service as feedback
from gate.health import database_health, gateway_liveness

router = APIRouter(tags=["feedback", "health"])


@router.post("/v1/feedback", response_model=FeedbackOut, status_code=201)
def post_feedback(
    request: Request, body: FeedbackIn, db: SessionDep, who: Operator, key: KeyHeader = None
) -> dict[str, Any]:
    """Record a user's thumbs, score or escalation against the answer they saw."""

    def work() -> dict[str, Any]:
        row = feedback.record(db, **body.model_dump())
        return FeedbackOut.model_validate(row).model_dump(mode="json")

    return run_once(db, key=key, actor=who.actor, request=request, body=body, work=work)


@router.get("/healthz")
def healthz(svc: ServicesDep) -> dict[str, object]:
    """Liveness: the process answers; a gateway also says whether its routing is stale."""
    if svc.routing is None:
        return {"status": "ok"}
    return gateway_liveness(svc.routing, svc.health)


@router.get("/readyz")
def readyz(svc: ServicesDep) -> JSONResponse:
    """Readiness: can this process serve traffic (a gateway: its routing was loaded once)."""
    if svc.routing is None:
        health = database_health(svc.sessions.kw["bind"])
        ready, checks = health.ok, {"database": "ok" if health.ok else health.detail}
    else:
        # Redis down or a stale state degrade to polling or to baseline only: both still
        # serve, so they are reported here and never take the gateway out of service.
        routing = svc.routing
        ready = routing.loaded
        checks = {
            "routing": "ok" if ready else "not loaded yet (database unreachable?)",
            "routing_stale": "yes (baseline only)" if routing.is_stale() else "no",
            "pubsub": "ok" if routing.pubsub_connected else "disconnected (polling only)",
        }
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)
