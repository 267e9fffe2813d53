"""One OTel span per route call (GenAI conventions + specgate.*), and one per pair."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagate import inject
from opentelemetry.trace import Span, SpanKind, Tracer

from gate.db.enums import Cohort, GenerationStatus
from gate.gateway.observe import CallResult
from gate.request.episodes import OWN, Episode
from gate.routing.snapshot import RolloutRouting, RouteTarget
from gate.telemetry import attributes as A

Redactor = Callable[[str], str]
OPERATIONS = {"chat": "chat", "completions": "text_completion"}
_REQUEST_ATTRIBUTES = (
    ("temperature", A.GEN_AI_REQUEST_TEMPERATURE, float),
    ("top_p", A.GEN_AI_REQUEST_TOP_P, float),
    ("max_tokens", A.GEN_AI_REQUEST_MAX_TOKENS, int),
    ("seed", A.GEN_AI_REQUEST_SEED, int),
)


@dataclass(frozen=True)
class CallContext:
    """Who a route call belongs to: rollout, pair, cohort and segment."""

    routing: RolloutRouting | None
    endpoint: str
    segment: str
    pair_id: str | None
    request_id: str
    mode: str
    capture: bool
    tenant: str | None = None
    episode: Episode = OWN
    # The arm of a rollout with several candidates this pair is mirrored to.
    arm: str | None = None
    # Routed by load: why, the crossover and the running requests (`gate.gateway.by_load`).
    by_load: tuple[str, int | None, float | None] | None = None
    # When the pair started (Unix ns): its span's start, stamped on its call spans too.
    pair_started_ns: int | None = None


class SpanEmitter:
    """Build and end the gateway's spans."""

    def __init__(
        self,
        tracer: Tracer,
        *,
        max_chars: int,
        redact: Redactor | None,
        eval_max_chars: int | None = None,
    ) -> None:
        self._tracer = tracer
        # The prompt is for display only; what evaluators read has its own, larger limit.
        self._max_chars = max_chars
        self._eval_max_chars = max(max_chars, eval_max_chars or 0)
        self._redact = redact or (lambda text: text)
        # In-flight counts are this process's own: name it, so they can be summed over replicas.
        self.replica = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"

    def pair_span(
        self,
        ctx: CallContext,
        *,
        body: Mapping[str, Any],
        inputs: Mapping[str, Any],
        is_control: bool,
        inflight: tuple[int, int],
        deadline_s: float,
        parent: Context | None,
    ) -> Context:
        """Emit the pair's facts and return the context its route calls are children of."""
        routing = ctx.routing
        assert routing is not None and ctx.pair_id is not None
        attributes: dict[str, Any] = {
            **_ids(ctx),
            A.PAIR_IS_CONTROL: is_control,
            A.PAIR_DEADLINE_S: deadline_s,
            A.INFLIGHT_BASELINE: inflight[0],
            A.INFLIGHT_CANDIDATE: inflight[1],
            A.GATEWAY_REPLICA: self.replica,
            A.REQUEST_ENDPOINT: ctx.endpoint,
        }
        cut = []
        attributes[A.REQUEST_INPUTS], whole = self._kept(orjson.dumps(inputs).decode())
        cut += [] if whole else ["inputs"]
        if ctx.capture:
            attributes[A.REQUEST_BODY], whole = self._kept(orjson.dumps(body).decode())
            cut += [] if whole else ["body"]
        if cut:
            attributes[A.REQUEST_TRUNCATED] = cut
        attributes.update(_episode(ctx.episode))
        span = self._tracer.start_span(
            A.PAIR_SPAN_NAME, context=parent, attributes=attributes, start_time=ctx.pair_started_ns
        )
        span.end()
        return trace.set_span_in_context(span, parent)

    def start_call(
        self,
        ctx: CallContext,
        route: RouteTarget,
        cohort: Cohort,
        body: Mapping[str, Any],
        *,
        parent: Context | None,
    ) -> tuple[Span, dict[str, str]]:
        """Start a route-call span; return it and the trace headers for the upstream."""
        operation = OPERATIONS[ctx.endpoint]
        attributes: dict[str, Any] = {
            A.GEN_AI_OPERATION_NAME: operation,
            A.GEN_AI_PROVIDER_NAME: route.provider,
            A.GEN_AI_REQUEST_MODEL: route.model,
            A.COHORT: cohort.value,
            A.ROUTE_ID: route.id,
            A.ROUTE_NAME: route.name,
            A.ROUTE_FINGERPRINT: route.fingerprint,
            A.STREAM: bool(body.get("stream")),
            **_ids(ctx),
        }
        for field_name, key, kind in _REQUEST_ATTRIBUTES:
            value = body.get(field_name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[key] = kind(value)
        span = self._tracer.start_span(
            f"{operation} {route.model}",
            kind=SpanKind.CLIENT,
            context=parent,
            attributes=attributes,
        )
        headers: dict[str, str] = {}
        inject(headers, context=trace.set_span_in_context(span))
        return span, headers

    def end_call(
        self,
        span: Span,
        result: CallResult,
        *,
        prompt: str | None,
        fallback: bool = False,
        exactness: str | None = None,
    ) -> None:
        """Record a finished call's outcome (and its exactness fields) on its span; end it."""
        span.set_attributes(_outcome(result, fallback=fallback))
        if exactness is not None:
            span.set_attribute(A.EXACTNESS, exactness)
        if prompt is not None:
            span.set_attribute(A.PROMPT, self._bounded(prompt))
            output, whole = self._kept(result.output_text)
            span.set_attribute(A.OUTPUT, output)
            if not whole:
                span.set_attribute(A.OUTPUT_TRUNCATED, True)
            if result.tool_calls:
                calls = [result.tool_calls[i] for i in sorted(result.tool_calls)]
                span.set_attribute(A.OUTPUT_EXTRA, orjson.dumps({"tool_calls": calls}).decode())
        if result.status is not GenerationStatus.OK:
            span.set_status(trace.Status(trace.StatusCode.ERROR, result.error or result.status))
        span.end()

    def dropped(
        self,
        ctx: CallContext,
        route: RouteTarget,
        cohort: Cohort,
        body: Mapping[str, Any],
        *,
        parent: Context | None,
        reason: str,
    ) -> None:
        """Record a call the gateway never made (pool saturated, rollout stopped)."""
        result = CallResult().fail(GenerationStatus.DROPPED, reason)
        self.not_called(ctx, route, cohort, body, parent=parent, result=result)

    def not_called(
        self,
        ctx: CallContext,
        route: RouteTarget,
        cohort: Cohort,
        body: Mapping[str, Any],
        *,
        parent: Context | None,
        result: CallResult,
        fallback: bool = False,
    ) -> None:
        """Record a call that was never made with its outcome, so the gate sees it."""
        span, _ = self.start_call(ctx, route, cohort, body, parent=parent)
        self.end_call(span, result, prompt=None, fallback=fallback)

    def _bounded(self, text: str) -> str:
        return self._redact(text)[: self._max_chars]

    def _kept(self, text: str) -> tuple[str, bool]:
        """Return an evaluation input within its limit, and whether it is whole."""
        redacted = self._redact(text)
        return redacted[: self._eval_max_chars], len(redacted) <= self._eval_max_chars


def _ids(ctx: CallContext) -> dict[str, Any]:
    ids: dict[str, Any] = {A.REQUEST_ID: ctx.request_id, A.SEGMENT: ctx.segment, A.MODE: ctx.mode}
    if ctx.routing is not None:
        ids[A.ROLLOUT_ID] = ctx.routing.rollout_id
        ids[A.ROLLOUT_STAGE] = ctx.routing.stage
    if ctx.pair_id is not None:
        ids[A.PAIR_ID] = ctx.pair_id
        if ctx.pair_started_ns is not None:
            ids[A.PAIR_STARTED_NS] = ctx.pair_started_ns
    if ctx.tenant:
        ids[A.TENANT] = ctx.tenant
    if ctx.arm is not None:
        ids[A.ARM] = ctx.arm
    if ctx.by_load is not None:
        why, level, running = ctx.by_load
        ids[A.ROUTED_BY_LOAD] = why
        if level is not None and running is not None:
            ids[A.CROSSOVER] = level
            ids[A.CROSSOVER_RUNNING] = running
    return ids


def _episode(episode: Episode) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if episode.id is not None and episode.source is not None:
        found[A.EPISODE] = episode.id
        found[A.EPISODE_SOURCE] = episode.source.value
    if episode.ignored:
        found[A.EPISODE_IGNORED] = list(episode.ignored)
    return found


def _outcome(result: CallResult, *, fallback: bool) -> dict[str, Any]:
    status = GenerationStatus.FALLBACK if fallback else result.status
    values: dict[str, Any] = {A.STATUS: status.value, A.FALLBACK: fallback}
    if result.logprobs_rejected:
        values[A.LOGPROBS_REJECTED] = True
    optional = {
        A.TTFT_S: result.ttft_s,
        A.TPOT_S: result.tpot_s,
        A.E2E_S: result.e2e_s,
        A.QUEUE_S: result.queue_s,
        A.ITL_MAX_S: result.itl_max_s,
        A.ENGINE_TTFT_S: result.engine_ttft_s,
        A.ENGINE_TPOT_S: result.engine_tpot_s,
        A.GEN_AI_USAGE_INPUT_TOKENS: result.input_tokens,
        A.GEN_AI_USAGE_OUTPUT_TOKENS: result.output_tokens,
        A.GEN_AI_RESPONSE_ID: result.response_id,
        A.GEN_AI_RESPONSE_MODEL: result.response_model,
        A.SPEC_DRAFTS: result.drafts,
        A.SPEC_DRAFT_TOKENS: result.draft_tokens,
        A.SPEC_ACCEPTED_TOKENS: result.accepted_tokens,
        A.LOGPROB_TOKENS: result.logprob_tokens,
        A.LOGPROB_SUM: result.logprob_sum,
        A.ERROR: result.error,
    }
    values.update({key: value for key, value in optional.items() if value is not None})
    if result.finish_reason:
        values[A.GEN_AI_RESPONSE_FINISH_REASONS] = [result.finish_reason]
    return values
