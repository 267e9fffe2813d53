"""Typed rows the collector (and the rehearsal recorder) write, and their column lists.

A row type names the columns a writer fills (a subset of its table's); its keys are the
column order everywhere a list is needed (COPY, unnest, INSERT). `tests/gate/test_rows.py`
fails when a row type and its table disagree.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict

from sqlalchemy import Table

from gate.db.models import Generation, Pair, Rehearsal, RequestRecord, SpanRecord

SPANS: Table = SpanRecord.__table__  # type: ignore[assignment]
REQUESTS: Table = RequestRecord.__table__  # type: ignore[assignment]
PAIRS: Table = Pair.__table__  # type: ignore[assignment]
GENERATIONS: Table = Generation.__table__  # type: ignore[assignment]
REHEARSALS: Table = Rehearsal.__table__  # type: ignore[assignment]


@dataclass(slots=True)
class SpanRow:
    """One span as the `spans` table stores it: hex ids, UTC times, plain-dict attributes."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    start_time: datetime
    end_time: datetime
    status_code: int
    status_message: str | None
    attributes: dict[str, Any]
    resource: dict[str, Any]
    service: str | None
    # OTLP fields beyond the columns (scope, trace state, flags, events, links): see
    # `collectors.extra`.
    extra: dict[str, Any] | None = None

    def with_attributes(self, attributes: dict[str, Any]) -> SpanRow:
        """Return a copy holding `attributes` (built directly: `dataclasses.replace` costs
        six times as much, on every normalised span)."""
        return SpanRow(
            self.trace_id, self.span_id, self.parent_span_id, self.name, self.kind,
            self.start_time, self.end_time, self.status_code, self.status_message,
            attributes, self.resource, self.service, self.extra,
        )  # fmt: skip

    @property
    def key(self) -> tuple[str, str]:
        """Return the idempotency key (trace id, span id)."""
        return (self.trace_id, self.span_id)


class RequestRow(TypedDict):
    """A `requests` row, from a pair span."""

    id: uuid.UUID
    rollout_id: int | None
    endpoint: str
    body: Any
    inputs: dict[str, Any]
    truncated: list[str] | None
    segment: str
    tenant: str | None
    inflight_baseline: int
    inflight_candidate: int
    gateway_replica: str | None
    episode: str | None
    episode_source: str | None
    created_at: datetime


class PairRow(TypedDict):
    """A `pairs` row, from a pair span or (a stub) from a route call's span."""

    id: uuid.UUID
    rollout_id: int
    request_id: uuid.UUID | None
    stage: int
    state: str
    is_control: bool
    segment: str
    episode: str | None
    # The arm of a rollout with several candidates (`rollout_arms.name`), or None.
    arm: str | None
    pair_span: bool  # from the pair span; false on a stub
    created_at: datetime
    deadline: datetime


class GenerationRow(TypedDict):
    """A `generations` row, from a route call's span."""

    rollout_id: int | None
    pair_id: uuid.UUID | None
    request_id: uuid.UUID | None
    cohort: str
    route_id: int | None
    route_fingerprint: str | None
    segment: str
    model: str | None
    temperature: float | None
    top_p: float | None
    max_tokens: int | None
    seed: int | None
    stream: bool
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    queue_s: float | None
    input_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None
    status: str
    error: str | None
    spec_drafts: int | None
    spec_draft_tokens: int | None
    spec_accepted_tokens: int | None
    prompt: str | None
    output: str | None
    output_extra: Any
    output_truncated: bool | None
    trace_id: str
    span_id: str
    response_id: str | None
    started_at: datetime
    engine_ttft_s: float | None
    engine_tpot_s: float | None
    logprob_tokens: int | None
    logprob_sum: float | None
    distinct_2: float | None
    # Per-token exactness fields (`gate.exactness_fit.TokenFit.as_dict`), or None.
    exactness: dict[str, Any] | None


class RehearsalRow(TypedDict):
    """A `rehearsals` row: the latest rehearsal summary recorded for a rollout."""

    rollout_id: int
    run_at: datetime | None
    baseline_url: str
    candidate_url: str
    workload: str
    requests: int
    at: int | None
    decision: str
    summary: dict[str, Any]
    recorded_by: str
    recorded_at: datetime


class EngineFacts(TypedDict):
    """What a vLLM span tells about the generation it served (its parent span)."""

    trace_id: str
    parent_span_id: str
    # The vLLM span's start: its generation started within `ENGINE_SKEW` of it.
    started_at: datetime
    queue_s: float | None
    input_tokens: int | None
    output_tokens: int | None


# How far a generation's start may lie from its vLLM span's: the engine receives the call
# after the gateway starts it (queued behind others, retried), on another host's clock. The
# join of the facts reads a partitioned `generations` within it of the facts' spans only.
ENGINE_SKEW = timedelta(hours=1)
# (id, pair id, trace id, span id) of a generation a batch inserted.
NewGeneration = tuple[int, uuid.UUID | None, str, str]

REQUEST_COLUMNS: tuple[str, ...] = tuple(RequestRow.__annotations__)
PAIR_COLUMNS: tuple[str, ...] = tuple(PairRow.__annotations__)
GENERATION_COLUMNS: tuple[str, ...] = tuple(GenerationRow.__annotations__)
REHEARSAL_COLUMNS: tuple[str, ...] = tuple(RehearsalRow.__annotations__)
# Generation fields vLLM's span can fill when the gateway's span did not carry them (a
# literal type, so mypy checks each against both row types).
EngineField = Literal["queue_s", "input_tokens", "output_tokens"]
ENGINE_FIELDS: tuple[EngineField, ...] = ("queue_s", "input_tokens", "output_tokens")
# The facts' columns the join matches and writes (the span's start only bounds it).
FACT_COLUMNS: tuple[str, ...] = ("trace_id", "parent_span_id", *ENGINE_FIELDS)
# Every `spans` column, in the table's order; a span row carries all but `received_at`.
SPAN_COLUMNS: tuple[str, ...] = tuple(column.name for column in SPANS.columns)
# Facts the pair span owns; a stub written from a route span gets them when it lands.
PAIR_SPAN_FIELDS = (
    "request_id", "is_control", "deadline", "created_at", "stage", "segment", "episode", "arm",
    "pair_span",
)  # fmt: skip
