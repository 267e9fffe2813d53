"""Mirror and control calls: scheduled in the bounded pool, re-checked when they start."""

from __future__ import annotations

import asyncio

from gate.db.enums import Cohort, GenerationStatus
from gate.gateway.call import Call, Gateway, end_span, reached, request_headers
from gate.gateway.mirror_pool import SHUTDOWN_RUNNING
from gate.gateway.observe import CallResult
from gate.gateway.sampling import Assignment
from gate.gateway.upstream import drain_call
from gate.routing.health import ROUTE_DOWN
from gate.routing.snapshot import RouteTarget
from gate.telemetry import attributes as A


def schedule_mirrors(gw: Gateway, call: Call, assignment: Assignment) -> None:
    """Mirror the candidate, or the baseline for a control pair, as the assignment says."""
    if assignment.control:
        _mirror(gw, call, call.routing.baseline, Cohort.CONTROL)
    elif call.plan.mirror:
        _mirror(gw, call, call.candidate, Cohort.CANDIDATE)


def _arm_active(gw: Gateway, call: Call, arm: str) -> bool:
    return gw.routing.arm_active(call.routing.alias, call.routing.rollout_id, arm)


def _mirror(gw: Gateway, call: Call, route: RouteTarget, cohort: Cohort) -> None:
    async def run(waited_s: float) -> None:
        try:
            # A kill or hold seen since the request arrived stops a call still queued.
            plan = gw.routing.current_plan(call.routing.alias, call.routing.rollout_id)
            if not (plan.control_slice if cohort is Cohort.CONTROL else plan.mirror):
                dropped("the rollout stopped mirroring before the call started")
            elif call.arm is not None and not _arm_active(gw, call, call.arm.name):
                dropped("the arm was killed before the call started")
            elif cohort is Cohort.CANDIDATE and not gw.health.admit(route.id):
                skipped()  # the baseline (control) is never skipped
            else:
                await call_route(waited_s)
        finally:
            gw.metrics.mirror_inflight.dec()

    async def call_route(waited_s: float) -> None:
        span, headers = gw.spans.start_call(call.ctx, route, cohort, call.body, parent=call.parent)
        span.set_attribute(A.MIRROR_QUEUE_S, waited_s)
        gw.metrics.mirror_queue_wait.observe(waited_s)
        result = CallResult()
        gw.inflight[route.id] = gw.inflight.get(route.id, 0) + 1
        try:
            result = await drain_call(
                gw.client,
                route,
                call.endpoint,
                call.payload_for(cohort),
                request_headers(route, headers),
                stream=call.stream,
                capture=call.prompt is not None,
                unasked=call.unasked_for(cohort),
            )
        except asyncio.CancelledError:
            # A shutdown is not the route's doing; only the mirror deadline is.
            if gw.mirror.closing:
                result.fail(GenerationStatus.DROPPED, SHUTDOWN_RUNNING)
            else:
                result.fail(GenerationStatus.TIMEOUT, "mirror deadline passed")
            raise
        finally:
            gw.inflight[route.id] -= 1
            end_span(gw, span, call, result)
            gw.metrics.observe(route.name, cohort.value, result, status=result.status.value)
            reached(gw, route, result)

    def dropped(reason: str) -> None:
        gw.spans.dropped(call.ctx, route, cohort, call.body, parent=call.parent, reason=reason)
        gw.metrics.mirror_dropped.labels(str(call.routing.rollout_id)).inc()

    def skipped() -> None:
        why = gw.health.skip_reason(route.id)
        # One refused connection so far: maybe a blip, so the call is dropped (not
        # attributable), though never the mirror pool's doing. Proven down: a candidate
        # that cannot answer is failing, and the call counts against it like the probe.
        status = GenerationStatus.ERROR if why == ROUTE_DOWN else GenerationStatus.DROPPED
        result = CallResult().fail(status, why)
        gw.spans.not_called(call.ctx, route, cohort, call.body, parent=call.parent, result=result)
        gw.metrics.observe(route.name, cohort.value, result, status=result.status.value)

    def not_started(reason: str) -> None:
        gw.metrics.mirror_inflight.dec()
        dropped(reason)

    if gw.mirror.submit(run, not_started):
        gw.metrics.mirror_inflight.inc()
    else:
        dropped("mirror pool saturated")
