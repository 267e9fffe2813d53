"""A promoted rollout routed by load keeps being judged on its mirrored pairs: the gate
kills it (the rollback to the baseline) when they prove harm; one promoted outright is
no longer judged."""

from __future__ import annotations

import pytest

from gate.db.enums import Decision, RolloutState
from gate.rollouts import service
from gate.rollouts.states import Action
from gate.verdicts.service import run_gate, running_rollouts
from tests import factories
from tests.gate.verdicts.test_service import POLICY, Recorder

pytestmark = pytest.mark.postgres
BY_LOAD = {**POLICY, "promotion": {"route_by_load": True}}


def promoted(session, policy):
    rollout = factories.running_rollout(session, name=f"r{len(policy)}", policy=policy)
    service.transition(session, rollout_id=rollout.id, action=Action.PROMOTE, actor="t", reason="t")
    return rollout


def test_the_gate_judges_and_kills_a_promoted_rollout_routed_by_load(pg_session):
    by_load, outright = promoted(pg_session, BY_LOAD), promoted(pg_session, POLICY)
    assert list(running_rollouts(pg_session)) == [by_load.id]
    # Its mirrored pairs: the candidate fails the evaluator 25 points more often.
    factories.seed_pairs(pg_session, by_load.id, 600, candidate_pass=0.60, baseline_pass=0.85)
    bus = Recorder()
    verdict = run_gate(pg_session, rollout_id=by_load.id, publisher=bus)
    assert verdict.decision is Decision.KILL, verdict.summary
    pg_session.expire_all()
    assert service.get_rollout(pg_session, rollout_id=by_load.id).state is RolloutState.KILLED
    assert service.get_rollout(pg_session, rollout_id=outright.id).state is RolloutState.PROMOTED
