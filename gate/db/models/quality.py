"""Quality and decision tables: evaluations, verdicts, feedback, reports, rehearsals."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.orm import Mapped, mapped_column

from gate.db.base import Base, BigIntPK, JSONType, UTCDateTime, utcnow
from gate.db.enums import Decision
from gate.db.models.control import str_enum


class Evaluation(Base):
    """One evaluator's score of one generation; unique so retried tasks are idempotent."""

    __tablename__ = "evaluations"
    __table_args__ = (UniqueConstraint("generation_id", "evaluator", "version"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True)
    generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id", ondelete="CASCADE"))
    # Its generation's `started_at`: the time `specgate db partition evaluations` partitions
    # by, so an evaluation lies in the period of its generation (`gate.db.partitions`).
    generation_started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    evaluator: Mapped[str] = mapped_column(String(64))
    version: Mapped[str] = mapped_column(String(32))
    score: Mapped[float | None] = mapped_column(Float)
    # NULL when the evaluator could not judge; `not_evaluable` then says why.
    passed: Mapped[bool | None] = mapped_column(Boolean)
    not_evaluable: Mapped[str | None] = mapped_column(String(32))
    details: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Verdict(Base):
    """One run of the gate over a rollout stage."""

    __tablename__ = "verdicts"
    __table_args__ = (Index(None, "rollout_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True)
    rollout_id: Mapped[int] = mapped_column(ForeignKey("rollouts.id", ondelete="CASCADE"))
    stage: Mapped[int] = mapped_column(Integer, default=0)
    decision: Mapped[Decision] = mapped_column(str_enum(Decision, "decision"))
    reason_codes: Mapped[list[str]] = mapped_column(JSONType, default=list)
    summary: Mapped[str] = mapped_column(Text, default="")
    # Per metric x segment: estimate, interval, counts.
    estimates: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    n_pairs: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Per load band of the candidate: the primary ratio, its interval, both routes' loads.
    bands: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list, server_default="[]")
    # Pairs left out as not load-matched (promoted and routed by load; 0: all judged).
    unmatched: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Episodes among the tested pairs (NULL: no episode held two pairs; issue 39).
    episodes: Mapped[int | None] = mapped_column(Integer)
    # A rollout with arms: the choice and each arm's outcome (NULL: one candidate; issue 40).
    arms: Mapped[dict[str, Any] | None] = mapped_column(JSONType)


# `gate_folds.arm` of a rollout of one candidate (a key column cannot be NULL).
NO_ARM = ""


class GateFold(Base):
    """The gate's running sufficient statistics of one rollout stage, up to a watermark.

    JSON documents are written and read by `gate.stats.incremental` (typed there).
    """

    __tablename__ = "gate_folds"

    rollout_id: Mapped[int] = mapped_column(
        ForeignKey("rollouts.id", ondelete="CASCADE"), primary_key=True
    )
    stage: Mapped[int] = mapped_column(Integer, primary_key=True)
    # The arm whose pairs (with the control pairs) are folded (`gate.stats.arms.member`);
    # NO_ARM: a rollout of one candidate, every pair of the stage (issue 40).
    arm: Mapped[str] = mapped_column(String(64), primary_key=True, server_default=NO_ARM)
    # The policy fields the statistics depend on, hashed: another policy refolds.
    policy_key: Mapped[str] = mapped_column(String(64), default="")
    # The last pair folded, in fold order (evaluated_at, id).
    watermark_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    watermark_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    pairs: Mapped[int] = mapped_column(Integer, default=0)
    warm_pairs: Mapped[int] = mapped_column(Integer, default=0)
    first_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Tail thresholds and collapse levels, fixed when the warm-up ends.
    warmup: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    segments: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    evaluators: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    collapse: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # The control slice's parity cells (pooled), for the data-quality alarm.
    control: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # The load bands' sums per band (`gate.stats.incremental.BandSums`).
    bands: Mapped[list[Any] | None] = mapped_column(JSONType)
    # Per cell, its episode sums and whether an episode holds two pairs
    # (`gate.stats.episode_sums`; NULL: none folded).
    episodes: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # What an arm's verdict shows beyond its gate, up to its own watermark: the arm's first
    # pair and its acceptance-length sums (`gate.verdicts.acceptance`; NULL: none folded).
    arm_sums: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # The ratings folded, up to which pair and rating id, and the thumbs-down cells' sums
    # (`gate.verdicts.feedback`; NULL: none folded).
    ratings: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class RatedEpisode(Base):
    """One episode's folded ratings in one cell of a fold state (`gate.verdicts.feedback`):
    per side the answers rated and those rated down, S_e and n_e of its episode sums."""

    __tablename__ = "gate_rated_episodes"

    rollout_id: Mapped[int] = mapped_column(
        ForeignKey("rollouts.id", ondelete="CASCADE"), primary_key=True
    )
    stage: Mapped[int] = mapped_column(Integer, primary_key=True)
    arm: Mapped[str] = mapped_column(String(64), primary_key=True)
    # A declared segment, or `all`: the pooled cell.
    segment: Mapped[str] = mapped_column(String(64), primary_key=True)
    episode: Mapped[str] = mapped_column(Text, primary_key=True)
    nb: Mapped[int] = mapped_column(BigInteger)
    sb: Mapped[int] = mapped_column(BigInteger)
    nc: Mapped[int] = mapped_column(BigInteger)
    sc: Mapped[int] = mapped_column(BigInteger)


class Feedback(Base):
    """A user's thumbs, score or escalation, joined to the generation it rates."""

    __tablename__ = "feedback"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True)
    generation_id: Mapped[int | None] = mapped_column(
        ForeignKey("generations.id", ondelete="CASCADE"), index=True
    )
    pair_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, index=True)
    response_id: Mapped[str | None] = mapped_column(String(128))
    thumbs: Mapped[int | None] = mapped_column(Integer)
    score: Mapped[float | None] = mapped_column(Float)
    escalated: Mapped[bool] = mapped_column(Boolean, default=False)
    comment: Mapped[str | None] = mapped_column(Text)
    # Indexed: the live gate reads the ratings since its stage began at each look.
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)


class Report(Base):
    """A generated regression report (weekly), with where its files were written."""

    __tablename__ = "reports"
    __table_args__ = (UniqueConstraint("kind", "period"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), default="weekly")
    period: Mapped[str] = mapped_column(String(16))
    markdown: Mapped[str] = mapped_column(Text, default="")
    location: Mapped[str | None] = mapped_column(String(1024))
    summary: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Rehearsal(Base):
    """The latest `specgate rehearse` summary recorded for a rollout (one per rollout)."""

    __tablename__ = "rehearsals"

    rollout_id: Mapped[int] = mapped_column(
        ForeignKey("rollouts.id", ondelete="CASCADE"), primary_key=True
    )
    # When the sweep started (None: a summary written before rehearsals said so).
    run_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    baseline_url: Mapped[str] = mapped_column(String(512))
    candidate_url: Mapped[str] = mapped_column(String(512))
    workload: Mapped[str] = mapped_column(String(512))
    requests: Mapped[int] = mapped_column(Integer)
    # The production concurrency the decision answers for (None: no --at given).
    at: Mapped[int | None] = mapped_column(Integer)
    decision: Mapped[str] = mapped_column(String(32))
    # The whole JSON summary (`gate.rehearse.schemas.RehearsalIn`).
    summary: Mapped[dict[str, Any]] = mapped_column(JSONType)
    recorded_by: Mapped[str] = mapped_column(String(128))
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
