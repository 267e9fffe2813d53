"""Typed models for every table; importing this module registers them all on `Base`."""

from gate.db.base import Base
from gate.db.models.control import (
    ApiKey,
    AuditEvent,
    Deployment,
    IdempotencyKey,
    Rollout,
    RolloutArm,
    Route,
)
from gate.db.models.controllers import ControllerKind, ControllerLink
from gate.db.models.quality import (
    Evaluation,
    Feedback,
    GateFold,
    RatedEpisode,
    Rehearsal,
    Report,
    Verdict,
)
from gate.db.models.telemetry import EngineSample, Generation, Pair, RequestRecord, SpanRecord

__all__ = [
    "ApiKey",
    "AuditEvent",
    "Base",
    "ControllerKind",
    "ControllerLink",
    "Deployment",
    "EngineSample",
    "Evaluation",
    "Feedback",
    "GateFold",
    "Generation",
    "IdempotencyKey",
    "Pair",
    "RatedEpisode",
    "Rehearsal",
    "Report",
    "RequestRecord",
    "Rollout",
    "RolloutArm",
    "Route",
    "SpanRecord",
    "Verdict",
]
