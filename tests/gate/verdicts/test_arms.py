"""Each arm judged on its own pairs (issue 40): a harmful arm's stream is a kill while a
faster arm's is not, whatever the other arm does."""

from __future__ import annotations

from sqlalchemy import update

from gate.db.enums import Decision
from gate.db.models import Pair
from gate.rollouts import service
from gate.rollouts.schemas import ArmIn, RolloutIn, RouteIn
from gate.rollouts.states import Action
from gate.stats.policy import load_policy
from gate.verdicts.arms import arm_records, arm_verdicts
from tests import factories
from tests.gate.verdicts.test_service import POLICY


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
