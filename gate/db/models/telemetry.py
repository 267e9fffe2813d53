"""Telemetry tables: raw spans, requests, pairs, generations, scraped engine samples."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    text,
    true,
)
from sqlalchemy.orm import Mapped, mapped_column

from gate.db.base import Base, BigIntPK, JSONType, UTCDateTime, utcnow
from gate.db.enums import Cohort, GenerationStatus, PairState
from gate.db.models.control import str_enum


class SpanRecord(Base):
    """A raw OpenTelemetry span, idempotent on (trace id, span id)."""

    __tablename__ = "spans"

    trace_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    span_id: Mapped[str] = mapped_column(String(16), primary_key=True)
    parent_span_id: Mapped[str | None] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(256))
    kind: Mapped[int] = mapped_column(Integer, default=0)
    service: Mapped[str | None] = mapped_column(String(128))
    start_time: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    end_time: Mapped[datetime] = mapped_column(UTCDateTime)
    status_code: Mapped[int] = mapped_column(Integer, default=0)
    status_message: Mapped[str | None] = mapped_column(Text)
    attributes: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    resource: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # What OTLP carries beyond the columns above (scope, trace state, flags, events, links,
    # dropped counts); NULL when a span has none of them.
    extra: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class RequestRecord(Base):
    """A sampled client request: bounded body and the evaluator inputs it declared."""

    __tablename__ = "requests"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    rollout_id: Mapped[int | None] = mapped_column(ForeignKey("rollouts.id", ondelete="CASCADE"))
    endpoint: Mapped[str] = mapped_column(String(32), default="chat")
    body: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # Declared evaluator inputs: context, references, tests, tenant, schema.
    inputs: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # What the gateway had to cut of the evaluation copy ("body", "inputs"); NULL: nothing.
    truncated: Mapped[list[str] | None] = mapped_column(JSONType)
    segment: Mapped[str] = mapped_column(String(64), default="chat")
    tenant: Mapped[str | None] = mapped_column(String(128))
    inflight_baseline: Mapped[int] = mapped_column(Integer, default=0)
    inflight_candidate: Mapped[int] = mapped_column(Integer, default=0)
    # The gateway process whose in-flight counts these are (NULL: recorded before 0012).
    gateway_replica: Mapped[str | None] = mapped_column(String(128))
    # The conversation or agent run it belongs to (`gate.request.episodes`) and where the
    # id came from; NULL: its own episode (and every request recorded before 0022).
    episode: Mapped[str | None] = mapped_column(Text)
    episode_source: Mapped[str | None] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)


UNEVALUATED = "state = 'complete' AND evaluated_at IS NULL"


class Pair(Base):
    """One sampled request answered by two routes (or two baseline calls for control)."""

    __tablename__ = "pairs"
    __table_args__ = (
        Index(None, "rollout_id", "stage", "created_at"),
        Index(None, "state", "deadline"),
        # The gate folds a stage's pairs in this order (see `gate.pairs.watermark`).
        Index(None, "rollout_id", "stage", "evaluated_at", "id"),
        # Whether a stage's episodes hold several pairs (`gate.verdicts.service`).
        Index(None, "rollout_id", "stage", "episode"),
        # Complete pairs still waiting for their evaluations: the sweep enqueues them again.
        Index(
            None,
            "completed_at",
            postgresql_where=text(UNEVALUATED),
            sqlite_where=text(UNEVALUATED),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    rollout_id: Mapped[int] = mapped_column(ForeignKey("rollouts.id", ondelete="CASCADE"))
    request_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("requests.id", ondelete="SET NULL"), unique=True
    )
    stage: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[PairState] = mapped_column(
        str_enum(PairState, "pair_state"), default=PairState.OPEN
    )
    is_control: Mapped[bool] = mapped_column(Boolean, default=False)
    segment: Mapped[str] = mapped_column(String(64), default="chat")
    # The request's episode (`requests.episode`), the gate's unit of independence; NULL:
    # the pair is its own episode.
    episode: Mapped[str | None] = mapped_column(Text)
    # The arm whose route answered as the candidate (`rollout_arms.name`); NULL: the
    # rollout has one candidate.
    arm: Mapped[str | None] = mapped_column(String(64))
    # The pair span (the request, the episode) has landed; false: a stub a route call's
    # span made first. Complete needs it, until the deadline (`gate.pairs.service`).
    pair_span: Mapped[bool] = mapped_column(Boolean, server_default=true())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    deadline: Mapped[datetime] = mapped_column(UTCDateTime)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When the pair's evaluations landed (or it was dropped): ready for the gate, once.
    evaluated_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Complete but never evaluated: how often the sweep enqueued it again, and when next.
    requeues: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    requeue_after: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Sampled-output parity, fixed when the pair is stamped (`gate.pairs.parity`): d =
    # candidate minus baseline per answer statistic the pair may compare; {} when a side
    # was sampled but the pair is not eligible; NULL when neither side carries settings.
    parity: Mapped[dict[str, float] | None] = mapped_column(JSONType)
    # Each route's running requests at the pair's start, and where the number came from
    # (engine, gateway, none), fixed when the pair is stamped (`gate.pairs.load.record`);
    # the source is NULL for pairs stamped before loads were (no load on either path).
    baseline_load: Mapped[float | None] = mapped_column(Float)
    candidate_load: Mapped[float | None] = mapped_column(Float)
    baseline_load_source: Mapped[str | None] = mapped_column(String(16))
    candidate_load_source: Mapped[str | None] = mapped_column(String(16))


class Generation(Base):
    """One route call, normalised from spans: what the gate and evaluators read."""

    __tablename__ = "generations"
    __table_args__ = (
        UniqueConstraint("trace_id", "span_id"),
        Index(None, "rollout_id", "cohort", "started_at"),
        Index(None, "rollout_id", "segment", "started_at"),
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True)
    rollout_id: Mapped[int | None] = mapped_column(ForeignKey("rollouts.id", ondelete="CASCADE"))
    pair_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("pairs.id", ondelete="CASCADE"), index=True
    )
    request_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    cohort: Mapped[Cohort] = mapped_column(str_enum(Cohort, "cohort"))
    route_id: Mapped[int | None] = mapped_column(ForeignKey("routes.id", ondelete="SET NULL"))
    route_fingerprint: Mapped[str | None] = mapped_column(String(64))
    segment: Mapped[str] = mapped_column(String(64), default="chat")
    model: Mapped[str | None] = mapped_column(String(256))
    temperature: Mapped[float | None] = mapped_column(Float)
    top_p: Mapped[float | None] = mapped_column(Float)
    max_tokens: Mapped[int | None] = mapped_column(Integer)
    seed: Mapped[int | None] = mapped_column(Integer)
    stream: Mapped[bool] = mapped_column(Boolean, default=False)
    ttft_s: Mapped[float | None] = mapped_column(Float)
    tpot_s: Mapped[float | None] = mapped_column(Float)
    # As the engine reported them (per-request metrics); ttft_s / tpot_s are the gateway's.
    engine_ttft_s: Mapped[float | None] = mapped_column(Float)
    engine_tpot_s: Mapped[float | None] = mapped_column(Float)
    e2e_s: Mapped[float | None] = mapped_column(Float)
    queue_s: Mapped[float | None] = mapped_column(Float)
    input_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)
    finish_reason: Mapped[str | None] = mapped_column(String(32))
    status: Mapped[GenerationStatus] = mapped_column(
        str_enum(GenerationStatus, "generation_status")
    )
    error: Mapped[str | None] = mapped_column(Text)
    spec_drafts: Mapped[int | None] = mapped_column(Integer)
    spec_draft_tokens: Mapped[int | None] = mapped_column(Integer)
    spec_accepted_tokens: Mapped[int | None] = mapped_column(Integer)
    # Sampled parity: how many answer tokens carried a log-probability, and their sum
    # (the per-call statistic; the arrays are never stored).
    logprob_tokens: Mapped[int | None] = mapped_column(Integer)
    logprob_sum: Mapped[float | None] = mapped_column(Float)
    # The answer's distinct word-bigram ratio (`gate.parity.text_distinct_2`), kept when
    # retention scrubs `output`; NULL when the text was not captured whole.
    distinct_2: Mapped[float | None] = mapped_column(Float)
    # Per-token exactness (`gate.exactness_fit.TokenFit.as_dict`): sums over the call's tokens,
    # never the arrays; NULL when the call carried no `top_logprobs`.
    exactness: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    prompt: Mapped[str | None] = mapped_column(Text)
    output: Mapped[str | None] = mapped_column(Text)
    # Tool calls and other structured output, for the schema evaluator.
    output_extra: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # True when the output was cut at the evaluation-input limit: not evaluable.
    output_truncated: Mapped[bool | None] = mapped_column(Boolean)
    trace_id: Mapped[str | None] = mapped_column(String(32))
    span_id: Mapped[str | None] = mapped_column(String(16))
    response_id: Mapped[str | None] = mapped_column(String(128), index=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    content_purged_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class EngineSample(Base):
    """A scraped counter or gauge value of one route's engine at one time."""

    __tablename__ = "engine_samples"
    __table_args__ = (Index(None, "route_id", "metric", "scraped_at"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True)
    route_id: Mapped[int] = mapped_column(ForeignKey("routes.id", ondelete="CASCADE"))
    metric: Mapped[str] = mapped_column(String(128))
    labels: Mapped[dict[str, str]] = mapped_column(JSONType, default=dict)
    value: Mapped[float] = mapped_column(Float)
    scraped_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
