"""Statements for routes and rollouts. Repositories never commit."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gate.db.enums import RolloutState
from gate.db.models import AuditEvent, Rollout, Route


def get_route_by_name(session: Session, name: str) -> Route | None:
    """Return the route called `name`, if any."""
    return session.scalars(select(Route).where(Route.name == name)).one_or_none()


def get_rollout(session: Session, rollout_id: int, *, for_update: bool = False) -> Rollout | None:
    """Return a rollout by id, row-locked when `for_update` (a no-op on SQLite)."""
    statement = select(Rollout).where(Rollout.id == rollout_id)
    if for_update:
        statement = statement.with_for_update()
    return session.scalars(statement).one_or_none()


def list_rollouts(
    session: Session, *, states: Sequence[RolloutState] | None = None
) -> Sequence[Rollout]:
    """Return rollouts, newest first, optionally only those in `states`."""
    statement = select(Rollout).order_by(Rollout.id.desc())
    if states:
        statement = statement.where(Rollout.state.in_(states))
    return session.scalars(statement).all()


def live_rollout_for_alias(session: Session, alias: str) -> Rollout | None:
    """Return the newest rollout for `alias` that is not finished."""
    live = (RolloutState.PENDING, RolloutState.RUNNING, RolloutState.HELD)
    statement = (
        select(Rollout)
        .where(Rollout.alias == alias, Rollout.state.in_(live))
        .order_by(Rollout.id.desc())
        .limit(1)
    )
    return session.scalars(statement).one_or_none()


def get_rollout_by_name(session: Session, name: str) -> Rollout | None:
    """Return the rollout called `name`, if any."""
    return session.scalars(select(Rollout).where(Rollout.name == name)).one_or_none()


def last_change(
    session: Session, rollout_id: int, *, until: datetime | None = None
) -> AuditEvent | None:
    """Return the audit event that put the rollout in its current state (or its state at
    `until`: the last change before it)."""
    where = [AuditEvent.rollout_id == rollout_id, AuditEvent.to_state.is_not(None)]
    if until is not None:
        where.append(AuditEvent.created_at <= until)
    return session.scalars(
        select(AuditEvent).where(*where).order_by(AuditEvent.id.desc()).limit(1)
    ).first()
