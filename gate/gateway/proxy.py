"""The proxy hot path: route a request, mirror a sample, stream the answer, emit spans.

Nothing here touches the database or blocks; mirror and control calls run in a bounded
background pool and never delay or fail the primary response.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson
from opentelemetry.propagate import extract
from starlette.requests import Request
from starlette.responses import Response

from gate.db.enums import Cohort, GenerationStatus
from gate.errors import BadRequest, GateError, NotFound
from gate.gateway import asks, logprobs
from gate.gateway.call import Call, Gateway, end_span, reached, request_headers
from gate.gateway.inputs import split_inputs
from gate.gateway.intake import read_json_body, segment_of, tenant_of
from gate.gateway.mirror_calls import schedule_mirrors
from gate.gateway.observe import CallResult
from gate.gateway.responses import ClientGone, EventStreamResponse, unless_disconnected
from gate.gateway.sampling import Assignment, assign, choose_arm, sticky_key
from gate.gateway.spans import CallContext
from gate.gateway.upstream import (
    FIRST_BYTE_TIMEOUT,
    JsonReply,
    Stream,
    call_json,
    encode,
    open_stream,
)
from gate.request.episodes import episode_of
from gate.request.messages import prompt_text
from gate.rollouts.states import PrimaryTarget
from gate.routing.health import ROUTE_DOWN
from gate.routing.snapshot import RouteTarget


def new_id() -> str:
    """Return a random (version 4) UUID as text."""
    return str(uuid.uuid4())


async def handle(gw: Gateway, request: Request, endpoint: str) -> Response | EventStreamResponse:
    """Serve one proxied request."""
    call, assignment, inputs = await _prepare(gw, request, endpoint)
    if assignment.sampled:
        inflight = (
            gw.inflight.get(call.routing.baseline.id, 0),
            gw.inflight.get(call.candidate.id, 0),
        )
        call.parent = gw.spans.pair_span(
            call.ctx,
            body=call.sent,
            inputs=inputs,
            is_control=assignment.control,
            inflight=inflight,
            deadline_s=gw.settings.pair_deadline_s,
            parent=call.parent,
        )
        schedule_mirrors(gw, call, assignment)
    route, cohort = _primary(call, assignment)
    canary = cohort is Cohort.CANDIDATE and call.plan.primary is PrimaryTarget.SPLIT
    if call.plan.primary is PrimaryTarget.BY_LOAD and not assignment.sampled:
        # Routed by load, the candidate call falls back as a canary's (no first-byte deadline).
        route, cohort = _by_load(gw, call)
        canary = cohort is Cohort.CANDIDATE
    if canary and not gw.health.admit(route.id):
        # A canary whose route refuses connections (scaled to zero) is not called: the
        # baseline serves, and the skipped call is the candidate's failure (a fallback).
        _skipped(gw, call, route, cohort)
        route, cohort, canary = call.routing.baseline, Cohort.BASELINE, False
    if call.stream:
        return await _serve_stream(gw, call, route, cohort, canary=canary)
    return await _serve_json(gw, call, route, cohort, canary=canary)


async def _prepare(
    gw: Gateway, request: Request, endpoint: str
) -> tuple[Call, Assignment, dict[str, Any]]:
    raw = await read_json_body(request, gw.settings.request_body_max_bytes)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    declared = split_inputs(body, request.headers)
    upstream = declared.upstream_body
    model = upstream.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required")
    routing = gw.routing.lookup(model)
    if routing is None:
        raise NotFound(f"the model '{model}' does not exist on this gateway")
    plan = gw.routing.plan(routing)
    segment = segment_of(request, upstream, declared.inputs)
    episode = episode_of(request.headers, upstream)
    key = sticky_key(raw, episode.key)
    assignment = assign(
        rollout_id=routing.rollout_id,
        plan=plan,
        fraction=routing.fraction,
        key=key,
        control_rate=gw.settings.control_rate,
    )
    sent = upstream
    stream = bool(upstream.get("stream"))
    options = upstream.get("stream_options")
    wants_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    if stream and not wants_usage:
        upstream = {**upstream, "stream_options": {**(options or {}), "include_usage": True}}
    capture = assignment.sampled and gw.settings.capture_content
    # Several candidates: the pair's arm (a control pair compares the baseline with itself).
    arm = None
    if routing.arms and assignment.sampled and not assignment.control:
        arm = choose_arm(routing.rollout_id, key, routing.arms)
    paired = routing.candidate if arm is None else arm.route
    unasked = payload = candidate_payload = None
    asked = asks.asked(gw, routing, paired, upstream, key) if assignment.sampled else None
    if asked is not None:
        unasked = encode(upstream)
        baseline, candidate = asked
        payload = unasked if baseline is None else encode(baseline)
        candidate_payload = None if candidate is None else encode(candidate)
    ctx = CallContext(
        routing=routing,
        endpoint=endpoint,
        segment=segment,
        pair_id=new_id() if assignment.sampled else None,
        pair_started_ns=time.time_ns() if assignment.sampled else None,
        request_id=new_id(),
        mode=routing.mode.value,
        capture=capture,
        tenant=tenant_of(declared.inputs),
        episode=episode,
        arm=None if arm is None else arm.name,
    )
    call = Call(
        request=request,
        endpoint=endpoint,
        routing=routing,
        plan=plan,
        body=upstream,
        sent=sent,
        payload=payload or encode(upstream),
        stream=stream,
        strip_usage=stream and not wants_usage,
        ctx=ctx,
        parent=extract(request.headers),
        prompt=prompt_text(upstream) if capture else None,
        unasked=unasked,
        candidate_payload=candidate_payload,
        arm=arm,
    )
    return call, assignment, declared.inputs


def _primary(call: Call, assignment: Assignment) -> tuple[RouteTarget, Cohort]:
    if call.plan.primary is PrimaryTarget.CANDIDATE or assignment.canary:
        return call.routing.candidate, Cohort.CANDIDATE
    return call.routing.baseline, Cohort.BASELINE


def _by_load(gw: Gateway, call: Call) -> tuple[RouteTarget, Cohort]:
    """Route a promoted rollout's unsampled request by the candidate's load; label it."""
    candidate = call.routing.candidate
    choice = gw.by_load.choose(call.routing, call.ctx.segment, gw.inflight.get(candidate.id, 0))
    call.ctx = replace(call.ctx, by_load=(choice.why.value, choice.crossover, choice.running))
    gw.metrics.routed_by_load(call.routing.rollout_id, choice.why.value)
    if choice.speculate:
        return candidate, Cohort.CANDIDATE
    return call.routing.baseline, Cohort.BASELINE


async def _serve_json(
    gw: Gateway, call: Call, route: RouteTarget, cohort: Cohort, *, canary: bool
) -> Response:
    span, headers = gw.spans.start_call(call.ctx, route, cohort, call.body, parent=call.parent)
    gw.inflight[route.id] = gw.inflight.get(route.id, 0) + 1
    result = CallResult()
    try:
        reply, _ = await unless_disconnected(
            call.request,
            call_json(
                gw.client,
                route,
                call.endpoint,
                call.payload_for(cohort),
                request_headers(route, headers),
                capture=call.prompt is not None,
                result=result,
                head_by=_first_byte_deadline(gw) if canary and _bounded(call) else None,
                unasked=call.unasked_for(cohort),
            ),
        )
    except ClientGone:
        _finish(gw, span, call, route, cohort, result.fail(*_CANCELLED), fallback=False)
        raise GateError("the client disconnected", status_code=499) from None
    finally:
        gw.inflight[route.id] -= 1
    fallback = canary and _failed_before_answer(reply, result)
    _finish(gw, span, call, route, cohort, result, fallback=fallback)
    if fallback:
        return await _serve_json(gw, call, call.routing.baseline, Cohort.BASELINE, canary=False)
    if _strips(call, cohort, result) and reply is not None and reply.status_code == 200:
        reply = replace(reply, content=logprobs.strip_json(reply.content))
    return _reply_or_error(reply, result)


async def _serve_stream(
    gw: Gateway, call: Call, route: RouteTarget, cohort: Cohort, *, canary: bool
) -> Response | EventStreamResponse:
    span, headers = gw.spans.start_call(call.ctx, route, cohort, call.body, parent=call.parent)
    gw.inflight[route.id] = gw.inflight.get(route.id, 0) + 1
    result = CallResult()
    opening = _open(gw, call, route, cohort, request_headers(route, headers), result, canary=canary)
    try:
        # A canary waits for its first event before answering: a client that leaves
        # meanwhile is gone, and no fallback is made for it.
        opened, events, first = await (
            unless_disconnected(call.request, opening) if canary else opening
        )
    except ClientGone:
        gw.inflight[route.id] -= 1
        _finish(gw, span, call, route, cohort, result.fail(*_CANCELLED), fallback=False)
        raise GateError("the client disconnected", status_code=499) from None
    failed = not isinstance(opened, Stream) or (canary and _bounded(call) and not first)
    if failed:
        gw.inflight[route.id] -= 1
        # A candidate 4xx is the client's own error: pass it through like the baseline's.
        client_error = isinstance(opened, JsonReply) and _client_error(opened.status_code)
        fallback = canary and not client_error
        _finish(gw, span, call, route, cohort, result, fallback=fallback)
        if fallback:
            return await _serve_stream(
                gw, call, call.routing.baseline, Cohort.BASELINE, canary=False
            )
        return _reply_or_error(opened if isinstance(opened, JsonReply) else None, result)
    assert isinstance(opened, Stream) and events is not None
    stream: Stream = opened
    released = False

    def release() -> None:  # once, however the answer ends
        nonlocal released
        if not released:
            released = True
            gw.inflight[route.id] -= 1
            _finish(gw, span, call, route, cohort, result, fallback=False)

    async def forward() -> AsyncIterator[bytes]:
        answered = False  # the last event was handed on: what comes after is not the call's
        try:
            for event in first:
                yield event
                answered = stream.done or stream.ended
            async for event in events:
                yield event
                answered = stream.done or stream.ended
        except BaseException:
            # A client that leaves once it has the whole answer (before the upstream's
            # body formally ends) got what it asked for; only one that left early cancelled.
            if not answered:
                result.fail(*_CANCELLED)
            raise
        finally:
            release()

    def abandon() -> None:  # the response failed before forwarding began
        stream.response.close()
        result.fail(*_CANCELLED)
        release()

    return EventStreamResponse(forward(), ended=lambda: stream.ended, abandon=abandon)


_CANCELLED = (GenerationStatus.CANCELLED, "client disconnected")


def _bounded(call: Call) -> bool:
    """Whether a canary's call has the first-byte deadline: a split canary's does; a
    promoted route's call routed by load does not, since it serves production traffic:
    cutting slow but working answers and redoing them on the baseline doubles the work
    exactly when the routes are loaded (it falls back only when it fails)."""
    return call.plan.primary is PrimaryTarget.SPLIT


def _first_byte_deadline(gw: Gateway) -> float:
    """The event-loop time by which a canary call must have answered: from its start."""
    return asyncio.get_running_loop().time() + gw.settings.canary_first_byte_timeout_s


async def _open(
    gw: Gateway,
    call: Call,
    route: RouteTarget,
    cohort: Cohort,
    headers: dict[str, str],
    result: CallResult,
    *,
    canary: bool,
) -> tuple[Stream | JsonReply | None, AsyncIterator[bytes] | None, list[bytes]]:
    """Open a streamed call: the reply, its events and those already read. A canary's
    first event must come by its deadline (connect, head and first event together,
    counted from the call's start)."""
    deadline = _first_byte_deadline(gw) if canary and _bounded(call) else None
    opened, _ = await open_stream(
        gw.client,
        route,
        call.endpoint,
        call.payload_for(cohort),
        headers,
        capture=call.prompt is not None,
        result=result,
        head_by=deadline,
        unasked=call.unasked_for(cohort),
    )
    if not isinstance(opened, Stream):
        return opened, None, []
    events = opened.events(
        strip_usage=call.strip_usage, strip_logprobs=_strips(call, cohort, result)
    )
    if deadline is None:
        return opened, events, []
    return opened, events, await _first_event(events, result, deadline)


def _strips(call: Call, cohort: Cohort, result: CallResult) -> bool:
    """Whether the answer carries logprobs the client did not ask for."""
    return call.unasked_for(cohort) is not None and not result.logprobs_rejected


async def _first_event(
    events: AsyncIterator[bytes], result: CallResult, deadline: float
) -> list[bytes]:
    """Wait for the candidate's first event until the canary's first-byte deadline."""
    try:
        async with asyncio.timeout_at(deadline):
            return [await anext(events)]
    except TimeoutError:
        await events.aclose()  # type: ignore[attr-defined]
        result.fail(GenerationStatus.TIMEOUT, FIRST_BYTE_TIMEOUT)
    except StopAsyncIteration:
        if result.status is GenerationStatus.OK:
            result.fail(GenerationStatus.ERROR, "the stream ended before its first event")
    return []


def _failed_before_answer(reply: JsonReply | None, result: CallResult) -> bool:
    if reply is None:
        return True
    return not _client_error(reply.status_code) or (
        reply.status_code == 200 and result.status is not GenerationStatus.OK
    )


def _client_error(status: int) -> bool:
    """A route's 4xx is the client's own error, except 401 and 403: the client never
    authenticates to a route, the gateway does with the route's credential."""
    return status < 500 and status not in _REFUSED


_REFUSED = (401, 403)


def _finish(
    gw: Gateway,
    span: Any,
    call: Call,
    route: RouteTarget,
    cohort: Cohort,
    result: CallResult,
    *,
    fallback: bool,
) -> None:
    end_span(gw, span, call, result, fallback=fallback)
    status = GenerationStatus.FALLBACK if fallback else result.status
    gw.metrics.observe(route.name, cohort.value, result, status=status.value)
    reached(gw, route, result)


def _skipped(gw: Gateway, call: Call, route: RouteTarget, cohort: Cohort) -> None:
    """Record a canary call not made because its route is down: it fell back."""
    why = gw.health.skip_reason(route.id)
    if why != ROUTE_DOWN:
        # One refused connection so far (maybe a blip): dropped, not the candidate's failure.
        gw.spans.dropped(call.ctx, route, cohort, call.body, parent=call.parent, reason=why)
        dropped = CallResult().fail(GenerationStatus.DROPPED, why)
        gw.metrics.observe(route.name, cohort.value, dropped, status=dropped.status.value)
        return
    result = CallResult().fail(GenerationStatus.ERROR, ROUTE_DOWN)
    gw.spans.not_called(
        call.ctx, route, cohort, call.body, parent=call.parent, result=result, fallback=True
    )
    gw.metrics.observe(route.name, cohort.value, result, status=GenerationStatus.FALLBACK.value)


def _reply_or_error(reply: JsonReply | None, result: CallResult) -> Response:
    if reply is not None and reply.status_code in _REFUSED:
        raise GateError(
            f"the upstream route refused the gateway's credential (HTTP {reply.status_code})",
            status_code=502,
        )
    if reply is not None:
        return Response(reply.content, status_code=reply.status_code, media_type=reply.content_type)
    if result.status is GenerationStatus.TIMEOUT:
        raise GateError(f"the upstream route timed out: {result.error}", status_code=504)
    raise GateError(f"the upstream route is unreachable: {result.error}", status_code=502)
