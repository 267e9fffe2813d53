"""A promoted rollout routed by load keeps being judged on its mirrored pairs: the gate
kills it (the rollback to the baseline) when they prove harm; one promoted outright is
no longer judged. It judges only the load-matched pairs, and says how many it left out."""

from __future__ import annotations

import pytest

from gate.db.enums import Decision, RolloutState
from gate.reports import glance
from gate.rollouts import service
from gate.rollouts.states import Action
from gate.verdicts.service import run_gate, running_rollouts
from tests import factories
from tests.gate.verdicts.test_service import POLICY, Recorder

pytestmark = pytest.mark.postgres
BY_LOAD = {**POLICY, "promotion": {"route_by_load": True}}


def close_loads(i: int) -> tuple[float, float]:
    return (3.0, 4.0)


def mixed_loads(i: int) -> tuple[float, float]:
    # Every third pair's routes ran 1 and 5 requests: not load-matched.
    return (1.0, 5.0) if i % 3 == 0 else (4.0, 4.0)


def promoted(session, policy):
    rollout = factories.running_rollout(session, name=f"r{len(policy)}", policy=policy)
    service.transition(session, rollout_id=rollout.id, action=Action.PROMOTE, actor="t", reason="t")
    return rollout


def test_the_gate_judges_and_kills_a_promoted_rollout_routed_by_load(pg_session):
    by_load, outright = promoted(pg_session, BY_LOAD), promoted(pg_session, POLICY)
    assert list(running_rollouts(pg_session)) == [by_load.id]
    # Its mirrored pairs: the candidate fails the evaluator 25 points more often.
    factories.seed_pairs(
        pg_session, by_load.id, 600, candidate_pass=0.60, baseline_pass=0.85, loads=close_loads
    )
    bus = Recorder()
    verdict = run_gate(pg_session, rollout_id=by_load.id, publisher=bus)
    assert verdict.decision is Decision.KILL, verdict.summary
    pg_session.expire_all()
    assert service.get_rollout(pg_session, rollout_id=by_load.id).state is RolloutState.KILLED
    assert service.get_rollout(pg_session, rollout_id=outright.id).state is RolloutState.PROMOTED


def test_the_verdict_and_the_glance_say_how_many_pairs_were_not_load_matched(pg_session):
    rollout = promoted(pg_session, BY_LOAD)
    factories.seed_pairs(pg_session, rollout.id, 150, loads=mixed_loads)
    verdict = run_gate(pg_session, rollout_id=rollout.id, publisher=Recorder())
    # 100 pairs past the warm-up of 50, a third of them (1 and 5 running) not matched.
    unmatched = sum(1 for i in range(50, 150) if i % 3 == 0)
    assert verdict.unmatched == unmatched
    assert verdict.n_pairs == 100 - unmatched
    assert f"{unmatched:,} pair(s) not load-matched" in verdict.summary
    headline = glance.latest(pg_session, rollout=rollout).headline
    assert headline.unmatched == unmatched
    assert any(f"{unmatched:,} pair(s) whose routes'" in r for r in headline.reasons)


def test_pairs_stamped_without_loads_are_not_judged_once_routed_by_load(pg_session):
    # Pairs from before loads were recorded: harm they show is not judged in this mode.
    rollout = promoted(pg_session, BY_LOAD)
    factories.seed_pairs(pg_session, rollout.id, 600, candidate_pass=0.60, baseline_pass=0.85)
    verdict = run_gate(pg_session, rollout_id=rollout.id, publisher=Recorder())
    assert verdict.decision is Decision.CONTINUE
    assert (verdict.n_pairs, verdict.unmatched) == (0, 550)
    assert "550 pair(s) not load-matched" in verdict.summary


def test_before_promotion_every_pair_is_judged(pg_session):
    rollout = factories.running_rollout(pg_session, name="running", policy=BY_LOAD)
    factories.seed_pairs(pg_session, rollout.id, 150, loads=mixed_loads)
    verdict = run_gate(pg_session, rollout_id=rollout.id, publisher=Recorder())
    assert (verdict.n_pairs, verdict.unmatched) == (100, 0)
