"""Gateway-shaped OTLP export bodies for `bench/ingest.py`: a `specgate.pair` span and two
route-call spans per sampled request, with fresh ids for every export."""

from __future__ import annotations

import json
import os
import random
import time
import uuid

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from gate.telemetry import attributes as a

GROUPS_PER_EXPORT = 170  # 510 spans: the SDK's BatchSpanProcessor sends up to 512
Offsets = list[tuple[int, int, int]]  # (offset, length, slot) of the ids to refresh


KINDS = {bool: "bool_value", int: "int_value", float: "double_value", str: "string_value"}


def add_span(scope: object, trace_id: bytes, parent: bytes, name: str, kind: int,
             attributes: dict[str, object], start: int) -> bytes:  # fmt: skip
    span = scope.spans.add()  # type: ignore[attr-defined]
    span.trace_id, span.span_id, span.parent_span_id = trace_id, os.urandom(8), parent
    span.name, span.kind = name, kind
    span.start_time_unix_nano, span.end_time_unix_nano = start, start + 1_200_000_000
    for key, item in attributes.items():
        pair = KeyValue(key=key)
        if isinstance(item, list):
            pair.value.array_value.values.add(string_value=str(item[0]))
        else:
            setattr(pair.value, KINDS[type(item)], item)
        span.attributes.append(pair)
    return bytes(span.span_id)


def route_attributes(
    ids: dict[str, int], cohort: str, pair: str, request: str
) -> dict[str, object]:
    candidate = cohort == "candidate"
    return {
        a.GEN_AI_OPERATION_NAME: "chat", a.GEN_AI_PROVIDER_NAME: "vllm",
        a.GEN_AI_REQUEST_MODEL: "llama-3.1-8b-instruct",
        a.GEN_AI_RESPONSE_MODEL: "llama-3.1-8b-instruct", a.GEN_AI_REQUEST_TEMPERATURE: 0.7,
        a.GEN_AI_REQUEST_TOP_P: 0.95, a.GEN_AI_REQUEST_MAX_TOKENS: 512,
        a.GEN_AI_RESPONSE_ID: "chatcmpl-" + uuid.uuid4().hex,
        a.GEN_AI_RESPONSE_FINISH_REASONS: ["stop"], a.GEN_AI_USAGE_INPUT_TOKENS: 812,
        a.GEN_AI_USAGE_OUTPUT_TOKENS: 214, a.ROLLOUT_ID: ids["rollout"], a.ROLLOUT_STAGE: 0,
        a.MODE: "shadow", a.PAIR_ID: pair, a.REQUEST_ID: request, a.SEGMENT: "code",
        a.COHORT: cohort, a.ROUTE_ID: ids[cohort], a.ROUTE_NAME: f"llama-{cohort}",
        a.ROUTE_FINGERPRINT: uuid.uuid4().hex, a.STATUS: "ok", a.STREAM: True,
        a.TTFT_S: random.uniform(0.05, 0.3), a.TPOT_S: random.uniform(0.01, 0.03),
        a.E2E_S: random.uniform(1, 6), a.ITL_MAX_S: 0.08,
        a.SPEC_DRAFTS: 60 if candidate else 0, a.SPEC_DRAFT_TOKENS: 300 if candidate else 0,
        a.SPEC_ACCEPTED_TOKENS: 150 if candidate else 0,
        a.PROMPT: "Refactor this function to avoid the quadratic loop. " * 6,
        a.OUTPUT: "Here is the refactored function using a dictionary lookup. " * 6,
    }  # fmt: skip


def template(ids: dict[str, int], raw: bool) -> tuple[bytes, Offsets]:
    """Return one export body and where its per-request ids sit; `raw`: nothing to normalise."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.add(key="service.name").value.string_value = "gateway"
    scope = resource_spans.scope_spans.add()
    scope.scope.name = "specgate.gateway"
    secrets: list[bytes] = []
    start = time.time_ns()
    for _ in range(GROUPS_PER_EXPORT):
        trace_id, pair, req = os.urandom(16), str(uuid.uuid4()), str(uuid.uuid4())
        body = json.dumps({"messages": [{"role": "user", "content": "Refactor this. " * 40}]})
        pair_attributes = {
            a.PAIR_ID: pair, a.REQUEST_ID: req, a.ROLLOUT_ID: ids["rollout"],
            a.ROLLOUT_STAGE: 0, a.MODE: "shadow", a.SEGMENT: "code", a.TENANT: "acme",
            a.PAIR_IS_CONTROL: False, a.PAIR_DEADLINE_S: 300.0, a.INFLIGHT_BASELINE: 12,
            a.INFLIGHT_CANDIDATE: 9, a.REQUEST_ENDPOINT: "chat", a.REQUEST_BODY: body,
        }  # fmt: skip
        name = "app.request" if raw else a.PAIR_SPAN_NAME
        root = add_span(scope, trace_id, b"", name, 1, rename(pair_attributes, raw), start)
        for cohort in ("baseline", "candidate"):
            attributes = rename(route_attributes(ids, cohort, pair, req), raw)
            add_span(scope, trace_id, root, "chat llama", 3, attributes, start)
        # Span ids need only be unique within a trace: a new trace id, pair id and request
        # id per sampled request make every span and row new.
        secrets += [trace_id, pair.encode(), req.encode()]
    data = request.SerializeToString()
    offsets = []
    for slot, secret in enumerate(secrets):
        at = data.find(secret)
        while at != -1:
            offsets.append((at, len(secret), slot))
            at = data.find(secret, at + 1)
    return data, offsets


def rename(attributes: dict[str, object], raw: bool) -> dict[str, object]:
    # Raw mode: the same sizes, but no specgate keys, so only `spans` rows are written.
    return {f"app.{key}" if raw else key: item for key, item in attributes.items()}


def fresh(data: bytes, offsets: Offsets) -> bytes:
    """Return a copy of `data` with new trace ids and new (valid) pair and request UUIDs."""
    out = bytearray(data)
    slots = GROUPS_PER_EXPORT * 3
    raw = os.urandom(16 * slots)
    values = []
    for slot in range(slots):
        chunk = raw[16 * slot : 16 * slot + 16]
        values.append(chunk if slot % 3 == 0 else str(uuid.UUID(bytes=chunk, version=4)).encode())
    for at, length, slot in offsets:
        out[at : at + length] = values[slot]
    return bytes(out)
