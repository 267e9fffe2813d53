"""Gateway-shaped spans (pair span, two route calls, vLLM's llm_request) and their FK rows."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from collectors.spans import KIND_CLIENT, KIND_INTERNAL, KIND_SERVER
from gate.db.enums import RolloutMode, RolloutState, RouteRole
from gate.db.models import Rollout, Route
from gate.db.rows import SpanRow
from gate.telemetry import attributes as a

START = datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC)
RESOURCE = {"service.name": "specgate-gateway"}


@dataclass(frozen=True)
class Ids:
    rollout: int
    baseline_route: int
    candidate_route: int


def make_rollout(session: Session, name: str = "llama-ngram") -> Ids:
    base = Route(name=f"{name}-base", base_url="http://b", model="llama", role=RouteRole.BASELINE)
    spec = Route(name=f"{name}-spec", base_url="http://c", model="llama", role=RouteRole.CANDIDATE)
    session.add_all([base, spec])
    session.flush()
    rollout = Rollout(
        name=name,
        alias=f"{name}-alias",
        baseline_route_id=base.id,
        candidate_route_id=spec.id,
        mode=RolloutMode.SHADOW,
        state=RolloutState.RUNNING,
    )
    session.add(rollout)
    session.flush()
    return Ids(rollout.id, base.id, spec.id)


def hex_id(size: int) -> str:
    return os.urandom(size).hex()


def span(trace_id: str, name: str, kind: int, attributes: dict, *, parent: str | None = None,
         offset_s: float = 0.0, duration_s: float = 1.0, status: int = 0) -> SpanRow:  # fmt: skip
    start = START + timedelta(seconds=offset_s)
    return SpanRow(
        trace_id=trace_id,
        span_id=hex_id(8),
        parent_span_id=parent,
        name=name,
        kind=kind,
        start_time=start,
        end_time=start + timedelta(seconds=duration_s),
        status_code=status,
        status_message=None,
        attributes=attributes,
        resource=RESOURCE,
        service="specgate-gateway",
    )


def route_attributes(ids: Ids, cohort: str, pair_id: uuid.UUID, request_id: uuid.UUID) -> dict:
    candidate = cohort == "candidate"
    return {
        a.GEN_AI_OPERATION_NAME: "chat",
        a.GEN_AI_PROVIDER_NAME: "vllm",
        a.GEN_AI_REQUEST_MODEL: "llama",
        a.GEN_AI_RESPONSE_MODEL: "llama-3-8b",
        a.GEN_AI_REQUEST_TEMPERATURE: 0.0,
        a.GEN_AI_REQUEST_TOP_P: 1.0,
        a.GEN_AI_REQUEST_MAX_TOKENS: 128,
        a.GEN_AI_REQUEST_SEED: 7,
        a.GEN_AI_RESPONSE_ID: f"chatcmpl-{cohort}",
        a.GEN_AI_RESPONSE_FINISH_REASONS: ["stop"],
        a.GEN_AI_USAGE_INPUT_TOKENS: 42,
        a.GEN_AI_USAGE_OUTPUT_TOKENS: 100,
        a.ROLLOUT_ID: ids.rollout,
        a.ROLLOUT_STAGE: 0,
        a.MODE: "shadow",
        a.PAIR_ID: str(pair_id),
        a.REQUEST_ID: str(request_id),
        a.SEGMENT: "code",
        a.COHORT: cohort,
        a.ROUTE_ID: ids.candidate_route if candidate else ids.baseline_route,
        a.ROUTE_NAME: "spec" if candidate else "base",
        a.ROUTE_FINGERPRINT: "fp-spec" if candidate else "fp-base",
        a.STATUS: "ok",
        a.STREAM: True,
        a.TTFT_S: 0.12 if candidate else 0.1,
        a.TPOT_S: 0.011 if candidate else 0.02,
        a.E2E_S: 1.2 if candidate else 2.1,
        a.ITL_MAX_S: 0.05,
        **(
            {
                a.SPEC_DRAFTS: 40,
                a.SPEC_DRAFT_TOKENS: 200,
                a.SPEC_ACCEPTED_TOKENS: 60,
                a.LOGPROB_TOKENS: 100,
                a.LOGPROB_SUM: -73.5,
                a.ENGINE_TTFT_S: 0.09,
                a.ENGINE_TPOT_S: 0.01,
            }
            if candidate
            else {}
        ),
        a.PROMPT: "fix this code",
        a.OUTPUT: f"answer from {cohort}",
        a.OUTPUT_EXTRA: json.dumps({"tool_calls": []}),
    }


def gateway_spans(ids: Ids, *, pair_id: uuid.UUID | None = None) -> list[SpanRow]:
    """One sampled request: pair span, baseline and candidate calls, vLLM's child span."""
    trace_id = hex_id(16)
    pair_id = pair_id or uuid.uuid4()
    request_id = uuid.uuid4()
    pair = span(
        trace_id,
        a.PAIR_SPAN_NAME,
        KIND_INTERNAL,
        {
            a.PAIR_ID: str(pair_id),
            a.REQUEST_ID: str(request_id),
            a.ROLLOUT_ID: ids.rollout,
            a.ROLLOUT_STAGE: 0,
            a.MODE: "shadow",
            a.SEGMENT: "code",
            a.TENANT: "acme",
            a.PAIR_IS_CONTROL: False,
            a.PAIR_DEADLINE_S: 60.0,
            a.INFLIGHT_BASELINE: 3,
            a.INFLIGHT_CANDIDATE: 1,
            a.GATEWAY_REPLICA: "gw-1:42:0a0b0c0d",
            a.REQUEST_ENDPOINT: "chat",
            a.EPISODE: "conv-7",
            a.EPISODE_SOURCE: "header",
            a.REQUEST_BODY: json.dumps({"messages": [{"role": "user", "content": "fix"}]}),
            a.REQUEST_INPUTS: json.dumps({"tests": ["assert f() == 1"]}),
        },
        duration_s=3.0,
    )
    baseline = span(
        trace_id,
        "chat llama",
        KIND_CLIENT,
        route_attributes(ids, "baseline", pair_id, request_id),
        parent=pair.span_id,
        offset_s=0.01,
        duration_s=2.1,
    )
    candidate = span(
        trace_id,
        "chat llama",
        KIND_CLIENT,
        route_attributes(ids, "candidate", pair_id, request_id),
        parent=pair.span_id,
        offset_s=0.02,
        duration_s=1.2,
    )
    vllm = span(
        trace_id,
        a.VLLM_SPAN_NAME,
        KIND_SERVER,
        {
            a.VLLM_TTFT: 0.09,
            a.VLLM_E2E: 1.1,
            a.VLLM_QUEUE: 0.004,
            a.VLLM_PROMPT_TOKENS: 42,
            a.VLLM_COMPLETION_TOKENS: 100,
            a.VLLM_REQUEST_ID: "cmpl-1",
        },
        parent=candidate.span_id,
        offset_s=0.03,
        duration_s=1.1,
    )
    return [pair, baseline, candidate, vllm]
