"""Route registration that a deploy job can re-run, and removal of unused routes.

Registering the same spec again is a no-op; a different spec under a taken name is refused
unless the caller asks for an update. A route that any rollout names is never changed or
removed: its verdicts, reports and audit trail describe that route as it was.
"""

from __future__ import annotations

import enum
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gate import audit
from gate.db.models import Rollout, RolloutArm, Route
from gate.errors import Conflict, NotFound
from gate.rollouts import repository, service
from gate.rollouts.schemas import RouteIn


class Registered(enum.StrEnum):
    """What registering a route did."""

    CREATED = "created"
    UNCHANGED = "unchanged"
    UPDATED = "updated"


def register_route(
    session: Session, *, spec: RouteIn, actor: str, update: bool = False
) -> tuple[Route, Registered]:
    """Create a route, keep an identical one, or (with `update`) change an unused one."""
    existing = repository.get_route_by_name(session, spec.name)
    if existing is None:
        try:
            with session.begin_nested():
                return service.create_route(session, spec=spec, actor=actor), Registered.CREATED
        except Conflict:
            # A concurrent registration won the name: judge its spec like any other.
            existing = repository.get_route_by_name(session, spec.name)
            if existing is None:
                raise
    differs = _differences(existing, spec)
    if not differs:
        return existing, Registered.UNCHANGED
    if not update:
        raise Conflict(
            f"route {spec.name!r} is already registered with another {', '.join(differs)}; "
            "register it under a new name, or update it (`specgate routes add --update`)"
        )
    _refuse_if_used(session, existing, "update")
    for field, value in _fields(spec).items():
        setattr(existing, field, value)
    audit.record(
        session, actor=actor, action="route.update", details={"route": spec.name, "fields": differs}
    )
    session.flush()
    return existing, Registered.UPDATED


def remove_route(session: Session, *, name: str, actor: str) -> None:
    """Remove a route that no rollout uses (its scraped engine samples go with it)."""
    route = repository.get_route_by_name(session, name)
    if route is None:
        raise NotFound(f"route {name!r} not found")
    _refuse_if_used(session, route, "remove")
    session.delete(route)
    audit.record(session, actor=actor, action="route.remove", details={"route": name})
    try:
        session.flush()
    except IntegrityError:
        # A rollout naming it was created concurrently (the foreign key refused the delete).
        raise Conflict(f"route {name!r} is used by a rollout; it cannot be removed") from None


def _fields(spec: RouteIn) -> dict[str, Any]:
    """Return the stored column values of a route spec, normalised as `create_route` stores."""
    return {
        "base_url": str(spec.base_url).rstrip("/"),
        "model": spec.model,
        "role": spec.role,
        "metrics_url": str(spec.metrics_url) if spec.metrics_url else None,
        "spec_method": spec.spec_method,
        "spec_tokens": spec.spec_tokens,
        "draft_model": spec.draft_model,
        "spec_config": spec.spec_config,
        # Only the credential's reference (header and source), never its value.
        "auth": spec.auth.model_dump() if spec.auth else None,
    }


def _differences(route: Route, spec: RouteIn) -> list[str]:
    return [f for f, value in _fields(spec).items() if getattr(route, f) != value]


def _refuse_if_used(session: Session, route: Route, verb: str) -> None:
    armed = select(RolloutArm.rollout_id).where(RolloutArm.route_id == route.id)
    uses = or_(
        Rollout.baseline_route_id == route.id,
        Rollout.candidate_route_id == route.id,
        Rollout.id.in_(armed),
    )
    names = list(session.scalars(select(Rollout.name).where(uses).order_by(Rollout.id).limit(5)))
    if names:
        total = session.scalar(select(func.count()).select_from(Rollout).where(uses))
        raise Conflict(
            f"cannot {verb} route {route.name!r}: {total} rollout(s) use it "
            f"({', '.join(names)}); register the new spec under a new name"
        )
