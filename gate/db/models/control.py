"""Control-plane tables: routes, rollouts, audit trail, API keys, idempotency keys."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Enum, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from gate.db.base import Base, BigIntPK, JSONType, UTCDateTime, utcnow
from gate.db.enums import ArmState, RolloutMode, RolloutState, RouteRole


def str_enum(enum: type[Any], name: str) -> Enum:
    """Store a StrEnum as its value in a VARCHAR with a named CHECK constraint."""
    return Enum(
        enum,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=16,
        values_callable=lambda members: [member.value for member in members],
    )


class Route(Base):
    __tablename__ = "routes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    base_url: Mapped[str] = mapped_column(String(512))
    model: Mapped[str] = mapped_column(String(256))
    metrics_url: Mapped[str | None] = mapped_column(String(512))
    role: Mapped[RouteRole] = mapped_column(str_enum(RouteRole, "route_role"))
    spec_method: Mapped[str | None] = mapped_column(String(32))
    spec_tokens: Mapped[int | None] = mapped_column(Integer)
    draft_model: Mapped[str | None] = mapped_column(String(256))
    spec_config: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # {"header": ..., "source": "env:NAME" | "file:/path"}: where the credential is, never
    # the credential (see gate.routing.credentials).
    auth: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Rollout(Base):
    __tablename__ = "rollouts"
    __table_args__ = (Index(None, "alias", "state"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    # The model name clients ask for; the gateway finds the rollout by it.
    alias: Mapped[str] = mapped_column(String(256))
    baseline_route_id: Mapped[int] = mapped_column(ForeignKey("routes.id"))
    candidate_route_id: Mapped[int] = mapped_column(ForeignKey("routes.id"))
    mode: Mapped[RolloutMode] = mapped_column(str_enum(RolloutMode, "rollout_mode"))
    sample_rate: Mapped[float] = mapped_column(Float, default=0.1)
    stage: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[RolloutState] = mapped_column(
        str_enum(RolloutState, "rollout_state"), default=RolloutState.PENDING
    )
    policy: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    baseline_route: Mapped[Route] = relationship(foreign_keys=[baseline_route_id])
    candidate_route: Mapped[Route] = relationship(foreign_keys=[candidate_route_id])
    # Several candidates (issue 40): every arm, the first one's route also in
    # `candidate_route_id`; none for a rollout of one candidate (its pairs name no arm).
    arms: Mapped[list[RolloutArm]] = relationship(
        order_by="RolloutArm.id", lazy="selectin", cascade="all, delete-orphan"
    )

    # Optimistic concurrency: every UPDATE checks and bumps `version`.
    __mapper_args__ = {"version_id_col": version}  # noqa: RUF012


class RolloutArm(Base):
    """One candidate route of a rollout with several: its name on pairs, and its state."""

    __tablename__ = "rollout_arms"
    __table_args__ = (
        UniqueConstraint("rollout_id", "name"),
        UniqueConstraint("rollout_id", "route_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    rollout_id: Mapped[int] = mapped_column(ForeignKey("rollouts.id", ondelete="CASCADE"))
    route_id: Mapped[int] = mapped_column(ForeignKey("routes.id"))
    # What pairs and pair records call it (`pairs.arm`).
    name: Mapped[str] = mapped_column(String(64))
    state: Mapped[ArmState] = mapped_column(
        str_enum(ArmState, "arm_state"), default=ArmState.ACTIVE
    )
    added_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    killed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Its weight in the gateway's choice of arm: its share is weight / the active arms'
    # sum (`gate.gateway.sampling.choose_arm`); set at stage boundaries when the policy
    # reallocates (`gate.rollouts.arms.reallocate`).
    weight: Mapped[float] = mapped_column(Float, default=1.0, server_default="1")

    route: Mapped[Route] = relationship(lazy="joined")


class AuditEvent(Base):
    __tablename__ = "audit_events"
    __table_args__ = (Index(None, "rollout_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True)
    rollout_id: Mapped[int | None] = mapped_column(ForeignKey("rollouts.id", ondelete="SET NULL"))
    # An API key ("key:<name>"), "gate" for automatic decisions, or "cli:<user>".
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str | None] = mapped_column(String(16))
    details: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    # Public lookup part of the key; the secret part is only stored as an HMAC.
    prefix: Mapped[str] = mapped_column(String(32), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(128))
    scopes: Mapped[list[str]] = mapped_column(JSONType, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"

    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    actor: Mapped[str] = mapped_column(String(128), primary_key=True)
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(String(512))
    request_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int] = mapped_column(Integer)
    response: Mapped[Any] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)


class Deployment(Base):
    """One row, made by the migrations: the identity routing messages carry."""

    __tablename__ = "deployment"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
