"""The gate on stored pairs: it kills a planted regression on its own, promotes a real gain."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import select

from gate.db.enums import Decision, RolloutMode, RolloutState
from gate.db.models import AuditEvent
from gate.rollouts import service
from gate.routing.pubsub import RoutingChange
from gate.stats.policy import load_policy
from gate.stats.replay import replay
from gate.verdicts.service import run_gate
from tests import factories

# Small but honest: one segment, short warm-up, no minimum duration.
POLICY = {
    "segments": ["chat"],
    "warmup_pairs": 50,
    "min_pairs": 300,
    "min_duration_s": 0,
    "stages": [100],
}


class Recorder:
    def __init__(self):
        self.changes: list[RoutingChange] = []

    def publish(self, change: RoutingChange) -> None:
        self.changes.append(change)


def running(session, **kw):
    return factories.running_rollout(session, policy=POLICY, **kw)


@pytest.fixture(params=["postgres", "sqlite"])
def db(request):
    name = "pg_session" if request.param == "postgres" else "sqlite_session"
    if request.param == "postgres":
        request.applymarker(pytest.mark.postgres)
    return request.getfixturevalue(name)


def test_a_planted_quality_drop_is_killed_by_the_gate(db):
    rollout = running(db)
    # Candidate fails the evaluator 25 points more often than the baseline.
    factories.seed_pairs(db, rollout.id, 600, candidate_pass=0.60, baseline_pass=0.85)
    bus = Recorder()
    verdict = run_gate(db, rollout_id=rollout.id, publisher=bus)
    assert verdict.decision is Decision.KILL, verdict.summary
    assert any("task" in code for code in verdict.reason_codes), verdict.reason_codes
    assert verdict.n_pairs > 0 and verdict.estimates
    db.expire_all()
    assert service.get_rollout(db, rollout_id=rollout.id).state is RolloutState.KILLED
    event = db.scalars(select(AuditEvent).where(AuditEvent.action == "kill")).one()
    assert event.actor == "gate" and event.reason == verdict.summary


def test_a_real_speedup_with_equal_quality_is_promoted(db):
    rollout = running(db)
    factories.seed_pairs(db, rollout.id, 1500, tpot_ratio=0.6)
    verdict = run_gate(db, rollout_id=rollout.id, publisher=None)
    assert verdict.decision is Decision.PROMOTE, verdict.summary
    db.expire_all()
    # Promotion is the pipeline's or the operator's act, not the gate's.
    assert service.get_rollout(db, rollout_id=rollout.id).state is RolloutState.RUNNING


def test_no_difference_is_not_promoted(db):
    rollout = running(db)
    factories.seed_pairs(db, rollout.id, 1500, tpot_ratio=1.0)
    verdict = run_gate(db, rollout_id=rollout.id, publisher=None)
    assert verdict.decision is Decision.CONTINUE, verdict.summary


def test_no_pairs_yet_is_continue(db):
    rollout = running(db)
    verdict = run_gate(db, rollout_id=rollout.id, publisher=None)
    assert verdict.decision is Decision.CONTINUE and verdict.n_pairs == 0


@pytest.mark.parametrize(("candidate_cancels", "killed"), [(0.12, True), (0.03, False)])
def test_the_canary_cancel_rate_on_stored_pairs_agrees_with_replay(db, candidate_cancels, killed):
    # Clients give up on 3% of baseline-served calls; on candidate-served ones 12% (or 3%).
    policy = load_policy(POLICY)
    records = factories.canary_cancel_records(policy, cancel_rate=0.03, pairs=1500, seed=5,
                                              candidate_cancel_rate=candidate_cancels)  # fmt: skip
    rollout = running(db, mode=RolloutMode.CANARY)
    factories.insert_records(db, rollout.id, records)
    verdict = run_gate(db, rollout_id=rollout.id, publisher=None)
    offline = replay(records, policy, every=len(records), mode=RolloutMode.CANARY).verdict
    assert (verdict.decision, tuple(verdict.reason_codes)) == (
        offline.decision, offline.reason_codes)  # fmt: skip
    assert verdict.n_pairs == offline.n_pairs and verdict.estimates == offline.estimates()
    assert ("kill:cancels:all" in verdict.reason_codes) is killed, verdict.summary
    assert (verdict.decision is Decision.KILL) is killed


def test_a_canary_stage_past_half_the_traffic_is_weighted_by_its_real_cohort_share(db):
    # Sampling 70 % of the traffic, the gateway serves [0, 0.7) by the candidate and the
    # remaining [0.7, 1) by the baseline: the candidate's share is 0.7, not 1/2.
    policy = load_policy(POLICY)
    records = factories.canary_cancel_records(policy, cancel_rate=0.03, pairs=3000, seed=7,
                                              candidate_cancel_rate=0.03)  # fmt: skip
    rng = random.Random(7)
    kept = [r for r in records if r["baseline"] is None or rng.random() < 0.3 / 0.7]
    served = sum(r["baseline"] is None for r in kept) / len(kept)
    assert 0.67 < served < 0.73
    rollout = running(db, mode=RolloutMode.CANARY, sample_rate=0.7)
    factories.insert_records(db, rollout.id, kept)
    verdict = run_gate(db, rollout_id=rollout.id, publisher=None)
    assert "hold:cohort_imbalance" not in verdict.reason_codes, verdict.summary
    assert verdict.decision is not Decision.KILL, verdict.summary
    offline = replay(kept, policy, every=len(kept), mode=RolloutMode.CANARY, candidate_share=0.7)
    assert (verdict.decision, tuple(verdict.reason_codes)) == (
        offline.verdict.decision, offline.verdict.reason_codes)  # fmt: skip


def test_a_canary_stage_that_leaves_no_baseline_cohort_says_why_and_judges_nothing(db):
    # Sampling all the traffic, a canary stage serves every sampled request by the candidate.
    policy = load_policy(POLICY)
    records = factories.canary_cancel_records(policy, cancel_rate=0.03, pairs=600, seed=8,
                                              candidate_cancel_rate=0.03)  # fmt: skip
    rollout = running(db, mode=RolloutMode.CANARY, sample_rate=1.0)
    factories.insert_records(db, rollout.id, [r for r in records if r["baseline"] is None])
    verdict = run_gate(db, rollout_id=rollout.id, publisher=None)
    # Not a hold: a held rollout is not judged, and the candidate-down kill must still run.
    assert verdict.decision is Decision.CONTINUE, verdict.summary
    assert verdict.reason_codes == ["continue:no_baseline_cohort"]
