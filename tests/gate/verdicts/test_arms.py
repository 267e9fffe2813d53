"""Each arm judged on its own pairs (issue 40): a harmful arm's stream is a kill while a
faster arm's is not, whatever the other arm does."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from gate.db.enums import ArmState, Decision, RolloutState
from gate.db.models import AuditEvent, Pair
from gate.errors import Conflict
from gate.rollouts import service
from gate.rollouts.schemas import ArmIn, RolloutIn, RouteIn
from gate.rollouts.states import Action
from gate.routing import service as routing
from gate.stats.policy import load_policy
from gate.verdicts.arms import arm_records, arm_verdicts
from gate.verdicts.service import compute, run_gate
from tests import factories
from tests.gate.verdicts.test_service import POLICY, Recorder


def armed(session, names):
    for name, role in [("plain", "baseline"), *[(f"route-{n}", "candidate") for n in names]]:
        spec = RouteIn(name=name, base_url="http://127.0.0.1:9/v1", model="m", role=role)
        service.create_route(session, spec=spec, actor="t")
    arms = [ArmIn(name=n, route=f"route-{n}") for n in names]
    spec = RolloutIn(name="r", alias="r", baseline_route="plain", arms=arms, policy=POLICY)
    rollout = service.create_rollout(session, spec=spec, actor="t")
    service.transition(session, rollout_id=rollout.id, action=Action.START, actor="t", reason="t")
    return rollout


def test_a_harmful_arm_is_a_kill_and_a_faster_one_is_not(sqlite_session):
    rollout = armed(sqlite_session, ["fast", "harmful", "idle"])
    factories.seed_pairs(sqlite_session, rollout.id, 600, tpot_ratio=0.7, arm="fast", seed=1)
    factories.seed_pairs(sqlite_session, rollout.id, 600, candidate_pass=0.6, arm="harmful", seed=2)
    verdicts = arm_verdicts(sqlite_session, rollout=rollout, policy=load_policy(POLICY))
    assert verdicts["harmful"].decision is Decision.KILL, verdicts["harmful"].summary
    assert verdicts["fast"].decision is not Decision.KILL, verdicts["fast"].summary
    assert verdicts["fast"].n_pairs > 0
    assert verdicts["idle"].reason_codes == ("no_pairs",)


def test_control_pairs_count_in_every_arm(sqlite_session):
    rollout = armed(sqlite_session, ["a", "b"])
    factories.seed_pairs(sqlite_session, rollout.id, 5, arm="a")
    factories.pair(sqlite_session, rollout.id)  # not evaluated: left out
    factories.seed_pairs(sqlite_session, rollout.id, 3, arm=None, seed=4)
    unarmed = update(Pair).where(Pair.arm.is_(None), Pair.evaluated_at.is_not(None))
    sqlite_session.execute(unarmed.values(is_control=True))  # baseline against itself
    sizes = {
        arm: len(records) for arm, records in arm_records(sqlite_session, rollout=rollout).items()
    }
    assert sizes == {"a": 8, "b": 3}


@pytest.mark.postgres
def test_the_gate_kills_a_harmful_arm_alone_and_the_best_arm_is_promoted(pg_session):
    db = pg_session
    rollout = armed(db, ["fast", "harmful", "slow"])
    factories.seed_pairs(db, rollout.id, 600, tpot_ratio=0.7, arm="fast", seed=1)
    factories.seed_pairs(db, rollout.id, 600, candidate_pass=0.6, arm="harmful", seed=2)
    factories.seed_pairs(db, rollout.id, 600, tpot_ratio=0.95, arm="slow", seed=3)
    bus = Recorder()
    verdict = run_gate(db, rollout_id=rollout.id, publisher=bus)
    db.commit()
    states = {a.name: a.state for a in service.get_rollout(db, rollout_id=rollout.id).arms}
    assert states == {"fast": ArmState.ACTIVE, "harmful": ArmState.KILLED, "slow": ArmState.ACTIVE}
    assert service.get_rollout(db, rollout_id=rollout.id).state is RolloutState.RUNNING
    kill = db.scalars(select(AuditEvent).where(AuditEvent.action == "arm.kill")).one()
    assert kill.actor == "gate" and kill.details["arm"] == "harmful"
    assert kill.reason.startswith("kill:eval:task"), kill.reason
    assert bus.changes, "the arm's kill is published after the commit"
    assert verdict.decision is Decision.PROMOTE, verdict.summary
    assert verdict.arms["winner"] == "fast" and "'fast'" in verdict.summary
    shown = {a["arm"]: a["state"] for a in verdict.arms["arms"]}
    assert shown == {"fast": "promoted", "harmful": "killed", "slow": "running"}
    # The final promotion: the winner becomes the candidate, the other live arm retired.
    promoted = routing.change_state(
        db, rollout_id=rollout.id, action=Action.PROMOTE, actor="ci", reason="gate promotes",
        publisher=bus,
    )  # fmt: skip
    fast = next(a for a in promoted.arms if a.name == "fast")
    assert promoted.state is RolloutState.PROMOTED
    assert promoted.candidate_route_id == fast.route_id
    retired = db.scalars(
        select(AuditEvent).where(AuditEvent.action == "arm.kill", AuditEvent.actor == "ci")
    ).one()
    assert retired.details["arm"] == "slow" and "won the best-arm choice" in retired.reason


@pytest.mark.postgres
def test_several_active_arms_without_a_winner_are_not_promoted(pg_session):
    rollout = armed(pg_session, ["a", "b"])
    with pytest.raises(Conflict):
        service.transition(
            pg_session, rollout_id=rollout.id, action=Action.PROMOTE, actor="t", reason="t"
        )


@pytest.mark.postgres
def test_a_single_candidate_verdict_is_the_pooled_one(pg_session):
    rollout = factories.running_rollout(pg_session, policy=POLICY)
    factories.seed_pairs(pg_session, rollout.id, 600, tpot_ratio=0.7)
    expected = compute(pg_session, rollout=rollout, policy=load_policy(POLICY))
    verdict = run_gate(pg_session, rollout_id=rollout.id, publisher=None)
    assert verdict.arms is None
    assert (verdict.decision, verdict.summary) == (expected.decision, expected.summary)
    assert verdict.reason_codes == list(expected.reason_codes)
