"""How a Kubernetes progressive-delivery controller is tied to a rollout."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from gate.db.base import Base, JSONType, UTCDateTime, utcnow
from gate.db.models.control import str_enum


class ControllerKind(StrEnum):
    ARGO_ROLLOUTS = "argo-rollouts"
    FLAGGER = "flagger"
    # specgate drives the traffic objects itself (HTTPRoute, LLMInferenceService).
    K8S_TRAFFIC = "k8s-traffic"


class ControllerLink(Base):
    __tablename__ = "controller_links"

    rollout_id: Mapped[int] = mapped_column(
        ForeignKey("rollouts.id", ondelete="CASCADE"), primary_key=True
    )
    controller: Mapped[ControllerKind] = mapped_column(str_enum(ControllerKind, "controller_kind"))
    # HMAC of the hook token under the server secret; the token itself is shown once.
    token_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    # The API key (by name) the controller polls the analysis with: only its polls are
    # check-ins, so another reader polling cannot hide a dead controller.
    analysis_key: Mapped[str | None] = mapped_column(String(128))
    # How often the controller checks in, and how many missed checks make specgate hold.
    poll_interval_s: Mapped[float] = mapped_column(Float)
    missed_polls: Mapped[int] = mapped_column(Integer)
    # None until the controller's first check-in: silence is counted from there.
    last_polled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Flagger's `checksum` of the revision the rollout judges (its hooks carry a hash of the
    # Canary's last applied spec): a different one later is a new revision under this link.
    revision_checksum: Mapped[str | None] = mapped_column(String(256))
    # k8s-traffic only: the objects the link drives (`gate/controllers/targets.py`), and what
    # specgate last wrote to them (`gate/controllers/traffic.py`); None until its first write.
    target: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    written: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
