"""Controller links: hook tokens (stored as HMACs), check-ins, and the silent-controller hold.

A rollout driven by a controller gets a link. A check-in is a call only the controller
makes: a Flagger hook (its token) or an analysis poll with the link's analysis key. Silence
counts from the first check-in, because a controller may wait long before it first asks
(Argo Rollouts' pause before its analysis step). When a running rollout's controller has
then missed `missed_polls` check-ins in a row, specgate holds the rollout: a controller
that stopped asking (deleted, crashed, aborted without telling) must not leave mirroring
running unwatched. Its next check-in resumes a rollout the watch held (not one a person or
a controller held), since it proves the controller is back and still driving.

A Flagger link also keeps the `checksum` of the revision its rollout judges (`hooks.py`
says which hooks carry it and what a different one does); a relink clears it.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gate import audit
from gate.controllers.targets import HttpRouteTarget, KServeTarget
from gate.db.base import utcnow
from gate.db.enums import RolloutMode, RolloutState
from gate.db.models import ApiKey, ControllerKind, ControllerLink, Rollout
from gate.errors import BadRequest, Unauthorized
from gate.keys.service import digest
from gate.rollouts import repository
from gate.rollouts import service as rollouts
from gate.rollouts.states import Action
from gate.routing import service as routing
from gate.routing.pubsub import Publisher

TOKEN_PREFIX = "sgh_"
WATCH_ACTOR = "specgate:controller-watch"


def link_rollout(
    session: Session,
    *,
    rollout_id: int,
    controller: ControllerKind,
    poll_interval_s: float,
    missed_polls: int,
    analysis_key: str | None,
    secret_key: str,
    actor: str,
    target: HttpRouteTarget | KServeTarget | None = None,
) -> tuple[ControllerLink, str | None]:
    """Tie a rollout to a controller; for Flagger return a new hook token (shown once)."""
    rollout = rollouts.get_rollout(session, rollout_id=rollout_id)
    _check_analysis_key(session, controller, analysis_key)
    _check_target(rollout, controller, target)
    link = session.get(ControllerLink, rollout_id) or ControllerLink(rollout_id=rollout_id)
    token = (
        TOKEN_PREFIX + secrets.token_urlsafe(32) if controller is ControllerKind.FLAGGER else None
    )
    link.controller = controller
    link.poll_interval_s = poll_interval_s
    link.missed_polls = missed_polls
    link.analysis_key = analysis_key
    link.token_hash = digest(secret_key, token) if token else None
    # Silence is counted from the first check-in after the (re)link, never from an older one.
    link.created_at, link.last_polled_at = utcnow(), None
    # A relink is a new link: its first analysis hook names the revision it judges.
    link.revision_checksum = None
    # A relink names the objects anew and accepts them as they are now (a person's edit too).
    link.target = target.model_dump(mode="json") if target else None
    link.written = None
    session.add(link)
    session.flush()
    audit.record(
        session,
        actor=actor,
        action="controller.link",
        rollout_id=rollout_id,
        details={
            "controller": controller.value,
            "token_rotated": token is not None,
            "analysis_key": analysis_key,
            "target": link.target,
        },
    )
    return link, token


def _check_target(
    rollout: Rollout, controller: ControllerKind, target: HttpRouteTarget | KServeTarget | None
) -> None:
    if (controller is ControllerKind.K8S_TRAFFIC) != (target is not None):
        raise BadRequest("a target (the objects to drive) goes with k8s-traffic, and only with it")
    if isinstance(target, KServeTarget) and rollout.mode is not RolloutMode.CANARY:
        raise BadRequest(
            "an LLMInferenceService has no mirror field, so it cannot shadow: link a canary"
            " rollout, or put specgate's gateway in the path for a shadow one"
        )


def _check_analysis_key(session: Session, controller: ControllerKind, name: str | None) -> None:
    # Argo Rollouts only polls: without its own key no call of it could be told from any
    # other reader's, and the watch would be blind.
    if name is None:
        if controller is ControllerKind.ARGO_ROLLOUTS:
            raise BadRequest(
                "argo-rollouts needs the name of the key it polls the analysis with"
                " (analysis_key, --analysis-key)"
            )
        return
    key = session.scalars(select(ApiKey).where(ApiKey.name == name)).first()
    if key is None or key.revoked_at is not None:
        raise BadRequest(f"no active API key named {name!r}")


def by_token(session: Session, *, token: str, secret_key: str) -> ControllerLink:
    """Return the link a hook token belongs to, or raise Unauthorized."""
    hashed = digest(secret_key, token)
    link = session.scalars(
        select(ControllerLink).where(ControllerLink.token_hash == hashed)
    ).first()
    if link is None:
        raise Unauthorized("unknown hook token")
    return link


def poll(session: Session, *, rollout_id: int, key: str, publisher: Publisher | None) -> None:
    """An analysis poll with API key `key`: a check-in only when it is the link's key."""
    link = session.get(ControllerLink, rollout_id)
    if link is not None and link.analysis_key is not None and link.analysis_key == key:
        check_in(session, link=link, publisher=publisher)


def check_in(session: Session, *, link: ControllerLink, publisher: Publisher | None) -> None:
    """Record that the controller asked now; resume the rollout if the watch held it."""
    link.last_polled_at = utcnow()
    session.flush()
    # Locked before reading the state: two check-ins at once resume once, never fail.
    rollout = repository.get_rollout(session, link.rollout_id, for_update=True)
    if (
        rollout is not None
        and rollout.state is RolloutState.HELD
        and held_by_watch(session, rollout_id=rollout.id)
    ):
        routing.change_state(
            session,
            rollout_id=rollout.id,
            action=Action.RESUME,
            actor=f"{link.controller.value}:check-in",
            reason=f"{link.controller.value} checked in again after specgate's silence hold",
            publisher=publisher,
        )


def same_revision(
    session: Session, *, link: ControllerLink, rollout: Rollout, checksum: str | None
) -> bool:
    """Record the revision checksum the rollout judges; return whether `checksum` is it."""
    if not checksum:
        return True
    # While pending no pair has been counted: the checksum at the start is the one judged.
    if link.revision_checksum is None or rollout.state is RolloutState.PENDING:
        link.revision_checksum = checksum
        session.flush()
        return True
    return link.revision_checksum == checksum


def held_by_watch(session: Session, *, rollout_id: int) -> bool:
    """Whether the rollout's current state comes from the silence hold."""
    event = repository.last_change(session, rollout_id)
    return event is not None and event.actor == WATCH_ACTOR and event.action == Action.HOLD


def silent(session: Session) -> Sequence[tuple[Rollout, ControllerLink]]:
    """Return running rollouts whose controller checked in, then missed `missed_polls`."""
    now = utcnow()
    rows = session.execute(
        select(Rollout, ControllerLink)
        .join(ControllerLink, ControllerLink.rollout_id == Rollout.id)
        .where(Rollout.state == RolloutState.RUNNING, ControllerLink.last_polled_at.is_not(None))
    ).all()
    late = []
    for rollout, link in rows:
        # A check-in while pending counts from the start, not from before it.
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
