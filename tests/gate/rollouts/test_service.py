"""Rollout life cycle on real Postgres: transitions, audit trail, optimistic concurrency."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gate.db.enums import RolloutState, RouteRole
from gate.db.models import AuditEvent, Rollout
from gate.errors import BadRequest, Conflict, InvalidTransition, StaleVersion
from gate.rollouts import service
from gate.rollouts.schemas import RolloutIn, RouteIn
from gate.rollouts.states import Action

pytestmark = pytest.mark.postgres
OPERATOR = "key:oncall"


def make_rollout(session, *, policy=None, name="llama-ngram") -> Rollout:
    for route, role in (("base", RouteRole.BASELINE), ("spec", RouteRole.CANDIDATE)):
        if service.repository.get_route_by_name(session, f"{name}-{route}") is None:
            service.create_route(
                session,
                spec=RouteIn(
                    name=f"{name}-{route}",
                    base_url="http://127.0.0.1:8001/v1",
                    model="llama",
                    role=role,
                ),
                actor=OPERATOR,
            )
    spec = RolloutIn(
        name=name,
        alias=f"{name}-alias",
        baseline_route=f"{name}-base",
        candidate_route=f"{name}-spec",
        policy=policy or {},
    )
    return service.create_rollout(session, spec=spec, actor=OPERATOR)


def audit_trail(session, rollout_id):
    statement = select(AuditEvent).where(AuditEvent.rollout_id == rollout_id).order_by("id")
    return [(e.actor, e.action, e.from_state, e.to_state) for e in session.scalars(statement)]


def act(session, rollout, action, actor=OPERATOR, **kw):
    return service.transition(
        session, rollout_id=rollout.id, action=action, actor=actor, reason="test", **kw
    )


def test_a_full_life_cycle_is_audited_with_its_actors(pg_session):
    rollout = make_rollout(pg_session, policy={"stages": [100]})
    act(pg_session, rollout, Action.START)
    act(pg_session, rollout, Action.KILL, actor="gate")
    act(pg_session, rollout, Action.RESUME)
    act(pg_session, rollout, Action.PROMOTE)
    assert rollout.state is RolloutState.PROMOTED and rollout.ended_at is not None
    assert audit_trail(pg_session, rollout.id) == [
        (OPERATOR, "create", None, "pending"),
        (OPERATOR, "start", "pending", "running"),
        ("gate", "kill", "running", "killed"),
        (OPERATOR, "resume", "killed", "running"),
        (OPERATOR, "promote", "running", "promoted"),
    ]


def test_a_killed_rollout_cannot_be_promoted_without_a_resume(pg_session):
    rollout = make_rollout(pg_session)
    act(pg_session, rollout, Action.START)
    act(pg_session, rollout, Action.KILL)
    with pytest.raises(InvalidTransition, match="cannot promote a rollout that is killed"):
        act(pg_session, rollout, Action.PROMOTE)
    with pytest.raises(InvalidTransition):
        act(pg_session, rollout, Action.START)


def test_kill_is_idempotent_and_writes_one_event(pg_session):
    rollout = make_rollout(pg_session)
    act(pg_session, rollout, Action.START)
    version = act(pg_session, rollout, Action.KILL).version
    again = act(pg_session, rollout, Action.KILL)
    assert again.state is RolloutState.KILLED and again.version == version
    assert [row[1] for row in audit_trail(pg_session, rollout.id)].count("kill") == 1


def test_promote_advances_through_the_policy_stages(pg_session):
    rollout = make_rollout(pg_session, policy={"stages": [1, 25, 100]})
    act(pg_session, rollout, Action.START)
    act(pg_session, rollout, Action.PROMOTE)
    assert (rollout.state, rollout.stage) == (RolloutState.RUNNING, 1)
    act(pg_session, rollout, Action.PROMOTE)
    act(pg_session, rollout, Action.PROMOTE)
    assert (rollout.state, rollout.stage) == (RolloutState.PROMOTED, 2)
    actions = [row[1] for row in audit_trail(pg_session, rollout.id)]
    assert actions == ["create", "start", "advance", "advance", "promote"]


def test_a_stale_expected_version_is_refused(pg_session):
    rollout = make_rollout(pg_session)
    stale = rollout.version
    act(pg_session, rollout, Action.START)
    with pytest.raises(StaleVersion):
        act(pg_session, rollout, Action.HOLD, expected_version=stale)
    with pytest.raises(StaleVersion):
        service.update_rollout(
            pg_session,
            rollout_id=rollout.id,
            expected_version=stale,
            actor=OPERATOR,
            sample_rate=0.5,
        )


def test_concurrent_writers_cannot_both_win(pg_committing):
    with pg_committing() as setup, setup.begin():
        rollout_id = make_rollout(setup).id
    first, second = pg_committing(), pg_committing()
    a = first.get(Rollout, rollout_id)
    b = second.get(Rollout, rollout_id)
    a.sample_rate = 0.2
    first.commit()
    b.sample_rate = 0.9
    with pytest.raises(StaleVersion):
        service._flush(second)
    second.rollback()
    with pg_committing() as check:
        assert check.get(Rollout, rollout_id).sample_rate == 0.2
    first.close()
    second.close()


def test_routes_must_exist_with_the_right_role(pg_session):
    make_rollout(pg_session)
    wrong = RolloutIn(
        name="x", alias="x", baseline_route="llama-ngram-spec", candidate_route="llama-ngram-base"
    )
    with pytest.raises(BadRequest, match="is a candidate route"):
        service.create_rollout(pg_session, spec=wrong, actor=OPERATOR)
    with pytest.raises(Conflict, match="already has a live rollout"):
        make_rollout(pg_session, name="llama-ngram")
