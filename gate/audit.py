"""The audit trail: every state change records who did it, what, why and when."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from gate.db.models import AuditEvent

GATE_ACTOR = "gate"


def key_actor(key_name: str) -> str:
    """Return the actor string for an API key."""
    return f"key:{key_name}"


def record(
    session: Session,
    *,
    actor: str,
    action: str,
    reason: str = "",
    rollout_id: int | None = None,
    from_state: str | None = None,
    to_state: str | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    """Add an audit event to the caller's transaction."""
    event = AuditEvent(
        actor=actor,
        action=action,
        reason=reason,
        rollout_id=rollout_id,
        from_state=from_state,
        to_state=to_state,
        details=details or {},
    )
    session.add(event)
    return event
