"""Changing routing state: the one way the control API and the gate move a rollout.

The state change commits with the caller's transaction; the change is published only
after that commit, so no gateway ever acts on a state the database does not hold.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from gate.db.enums import RolloutState
from gate.db.hooks import after_commit
from gate.db.models import Rollout
from gate.rollouts import arms, repository, service
from gate.rollouts.schemas import ArmIn
from gate.rollouts.states import Action
from gate.routing.pubsub import Publisher, RoutingChange


def change_state(
    session: Session,
    *,
    rollout_id: int,
    action: Action,
    actor: str,
    reason: str,
    publisher: Publisher | None,
    expected_version: int | None = None,
) -> Rollout:
    """Apply `action` to a rollout and publish the result once the transaction commits."""
    rollout = service.transition(
        session,
        rollout_id=rollout_id,
        action=action,
        actor=actor,
        reason=reason,
        expected_version=expected_version,
    )
    return _published(session, publisher, rollout)


def add_arm(
    session: Session,
    *,
    rollout_id: int,
    spec: ArmIn,
    actor: str,
    reason: str,
    publisher: Publisher | None,
) -> Rollout:
    """Add an arm; gateways reload the rollout's arms once the transaction commits."""
    rollout = arms.add_arm(session, rollout_id=rollout_id, spec=spec, actor=actor, reason=reason)
    return _published(session, publisher, rollout)


def kill_arm(
    session: Session,
    *,
    rollout_id: int,
    name: str,
    actor: str,
    reason: str,
    publisher: Publisher | None,
) -> Rollout:
    """Kill one arm; gateways reload the rollout's arms once the transaction commits."""
    rollout = arms.kill_arm(session, rollout_id=rollout_id, name=name, actor=actor, reason=reason)
    return _published(session, publisher, rollout)


def _published(session: Session, publisher: Publisher | None, rollout: Rollout) -> Rollout:
    """Publish the rollout's state and version once the transaction commits; return it."""
    # An arm's change leaves the state as it was: a gateway reads the database on every
    # message, and that read brings the arms (`gate.routing.sync`).
    change = RoutingChange(rollout.id, rollout.state.value, rollout.version)
    publish_after_commit(session, publisher, change)
    return rollout


def kill_all(
    session: Session, *, actor: str, reason: str, publisher: Publisher | None
) -> list[Rollout]:
    """Kill every rollout that is not already killed: all traffic goes to baselines."""
    live = (RolloutState.PENDING, RolloutState.RUNNING, RolloutState.HELD, RolloutState.PROMOTED)
    killed = [
        change_state(
            session,
            rollout_id=rollout.id,
            action=Action.KILL,
            actor=actor,
            reason=reason,
            publisher=publisher,
        )
        for rollout in repository.list_rollouts(session, states=live)
    ]
    return killed


def publish_after_commit(
    session: Session, publisher: Publisher | None, change: RoutingChange
) -> None:
    """Publish `change` when the session's transaction commits (never on rollback)."""
    if publisher is not None:
        after_commit(session, lambda: publisher.publish(change))
