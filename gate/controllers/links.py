"""Controller links: hook tokens (stored as HMACs), check-ins, and the silent-controller hold.

A rollout driven by a controller gets a link. Every analysis poll or webhook call is a
check-in; when a running rollout's controller has missed `missed_polls` check-ins in a row,
specgate holds the rollout, because a controller that stopped asking (deleted, crashed,
aborted without telling) must not leave mirroring running unwatched.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gate import audit
from gate.db.base import utcnow
from gate.db.enums import RolloutState
from gate.db.models import ControllerKind, ControllerLink, Rollout
from gate.errors import Unauthorized
from gate.rollouts import service as rollouts
from gate.rollouts.states import Action
from gate.routing import service as routing
from gate.routing.pubsub import Publisher

TOKEN_PREFIX = "sgh_"
WATCH_ACTOR = "specgate:controller-watch"


def token_digest(secret_key: str, token: str) -> str:
    """Return the stored form of a hook token."""
    return hmac.new(secret_key.encode(), token.encode(), hashlib.sha256).hexdigest()


def link_rollout(
    session: Session,
    *,
    rollout_id: int,
    controller: ControllerKind,
    poll_interval_s: float,
    missed_polls: int,
    secret_key: str,
    actor: str,
) -> tuple[ControllerLink, str | None]:
    """Tie a rollout to a controller; for Flagger return a new hook token (shown once)."""
    rollouts.get_rollout(session, rollout_id=rollout_id)
    link = session.get(ControllerLink, rollout_id) or ControllerLink(rollout_id=rollout_id)
    token = (
        TOKEN_PREFIX + secrets.token_urlsafe(32) if controller is ControllerKind.FLAGGER else None
    )
    link.controller = controller
    link.poll_interval_s = poll_interval_s
    link.missed_polls = missed_polls
    link.token_hash = token_digest(secret_key, token) if token else None
    # Silence is counted from the (re)link, never from an older link's time.
    link.created_at, link.last_polled_at = utcnow(), None
    session.add(link)
    session.flush()
    audit.record(
        session,
        actor=actor,
        action="controller.link",
        rollout_id=rollout_id,
        details={"controller": controller.value, "token_rotated": token is not None},
    )
    return link, token


def by_token(session: Session, *, token: str, secret_key: str) -> ControllerLink:
    """Return the link a hook token belongs to, or raise Unauthorized."""
    digest = token_digest(secret_key, token)
    link = session.scalars(
        select(ControllerLink).where(ControllerLink.token_hash == digest)
    ).first()
    if link is None:
        raise Unauthorized("unknown hook token")
    return link


def check_in(session: Session, *, rollout_id: int) -> None:
    """Record that the rollout's controller asked about it now (no-op without a link)."""
    link = session.get(ControllerLink, rollout_id)
    if link is not None:
        link.last_polled_at = utcnow()
        session.flush()


def silent(session: Session) -> Sequence[tuple[Rollout, ControllerLink]]:
    """Return running rollouts whose controller missed `missed_polls` check-ins in a row."""
    now = utcnow()
    rows = session.execute(
        select(Rollout, ControllerLink)
        .join(ControllerLink, ControllerLink.rollout_id == Rollout.id)
        .where(Rollout.state == RolloutState.RUNNING)
    ).all()
    late = []
    for rollout, link in rows:
        since = max(t for t in (link.last_polled_at, link.created_at, rollout.started_at) if t)
        if now - since > timedelta(seconds=link.poll_interval_s * link.missed_polls):
            late.append((rollout, link))
    return late


def hold_silent(session: Session, *, publisher: Publisher | None) -> list[int]:
    """Hold every running rollout whose controller went silent; return their ids."""
    held = []
    for rollout, link in silent(session):
        waited = link.poll_interval_s * link.missed_polls
        routing.change_state(
            session,
            rollout_id=rollout.id,
            action=Action.HOLD,
            actor=WATCH_ACTOR,
            reason=f"{link.controller.value} has not checked in for {waited:.0f} s "
            f"({link.missed_polls} intervals of {link.poll_interval_s:.0f} s)",
            publisher=publisher,
        )
        held.append(rollout.id)
    return held
