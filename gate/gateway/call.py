"""What a request carries through the gateway, and the gateway's long-lived parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Span
from starlette.requests import Request

from gate.db.enums import Cohort
from gate.gateway.by_load import LoadRouter
from gate.gateway.fits import FitWorker, fit_of
from gate.gateway.logprobs import RejectingRoutes
from gate.gateway.metrics import GatewayMetrics
from gate.gateway.mirror_pool import MirrorPool
from gate.gateway.observe import CallResult
from gate.gateway.spans import CallContext, SpanEmitter
from gate.gateway.transport import Transport
from gate.rollouts.states import RoutingPlan
from gate.routing.health import RouteHealth
from gate.routing.snapshot import Arm, RolloutRouting, RouteTarget
from gate.routing.sync import RoutingState
from gate.settings import Settings


@dataclass
class Gateway:
    """The gateway's long-lived parts, built once in the app's lifespan."""

    settings: Settings
    routing: RoutingState
    client: Transport
    mirror: MirrorPool
    spans: SpanEmitter
    metrics: GatewayMetrics
    inflight: dict[int, int]
    health: RouteHealth
    # Computes calls' exactness fields off the event loop and ends their spans.
    fits: FitWorker
    # Routes that rejected the logprobs we asked for (this process's memory).
    rejecting: RejectingRoutes = field(default_factory=RejectingRoutes)
    # Which route serves a promoted rollout routed by load (its hysteresis state).
    by_load: LoadRouter = field(default_factory=LoadRouter)


@dataclass
class Call:
    """One request on its way through the gateway."""

    request: Request
    endpoint: str
    routing: RolloutRouting
    plan: RoutingPlan
    body: dict[str, Any]
    # The body as the client sent it (without declared inputs): what is stored.
    sent: dict[str, Any]
    payload: bytes
    stream: bool
    strip_usage: bool
    ctx: CallContext
    parent: Context | None
    prompt: str | None
    # We asked a route for logprobs the client did not ask for: this is the payload
    # without them (sent to a route that rejects them), and the client's answer loses them.
    unasked: bytes | None = None
    # The candidate's payload where it differs from the baseline's `payload` (it asks
    # for alternatives the baseline is not asked for). A side not asked sends `unasked`.
    candidate_payload: bytes | None = None
    # A rollout with several candidates: the arm this sampled request is mirrored to.
    arm: Arm | None = None

    @property
    def candidate(self) -> RouteTarget:
        """Return the candidate route of this request: its arm's, or the rollout's."""
        return self.routing.candidate if self.arm is None else self.arm.route

    def payload_for(self, cohort: Cohort) -> bytes:
        """Return what the call of `cohort` sends to its route."""
        if cohort is Cohort.CANDIDATE and self.candidate_payload is not None:
            return self.candidate_payload
        return self.payload

    def unasked_for(self, cohort: Cohort) -> bytes | None:
        """Return the payload without our logprobs when the call of `cohort` asks for
        them (the client's answer then loses them); None when it sends what the client did."""
        if self.unasked is None or self.payload_for(cohort) is self.unasked:
            return None
        return self.unasked


def reached(gw: Gateway, route: RouteTarget, result: CallResult) -> None:
    """Feed what the gateway remembers of a route: its down state (a connection refused or
    timed out, or an answer) and whether it rejects the logprobs we ask for."""
    if result.unreachable:
        gw.health.connect_failed(route.id, route.name)
    elif result.http_status is not None:
        gw.health.connected(route.id)
    if result.logprobs_rejected:
        gw.rejecting.rejected(route.id, route.name, answered_without=result.http_status)


def end_span(
    gw: Gateway, span: Span, call: Call, result: CallResult, *, fallback: bool = False
) -> None:
    """End a route call's span; one whose answer carries alternatives ends in the
    background, with its exactness fields (`gate.gateway.fits`)."""
    fit = fit_of(call.routing.exactness, call.body, result)

    def end(exactness: str | None) -> None:
        gw.spans.end_call(span, result, prompt=call.prompt, fallback=fallback, exactness=exactness)

    if fit is None:
        end(None)
    else:
        gw.fits.end_with(end, fit)


def request_headers(route: RouteTarget, trace_headers: dict[str, str]) -> dict[str, str]:
    """Return the headers of a route call: JSON, the route's credential, the trace."""
    return {"content-type": "application/json", **route.headers, **trace_headers}
