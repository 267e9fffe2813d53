"""Periodic work: the gate judges running rollouts on its own; beat tasks are registered."""

from __future__ import annotations

from datetime import timedelta

from gate.db.base import utcnow
from gate.db.engine import make_engine, session_factory
from gate.db.enums import Cohort, PairState, RolloutState
from gate.periodic import Job, PeriodicLoop, judge_running, sweep_pairs
from gate.rollouts import service
from gate.rollouts.states import Action
from gate.settings import Settings
from gate.status import store_status
from tests import factories
from tests.gate.verdicts.test_service import POLICY
from tests.waits import wait_until


def test_the_periodic_gate_kills_a_bad_rollout_and_spares_a_good_one(sqlite_url):
    sessions = session_factory(make_engine(sqlite_url))
    with sessions() as db, db.begin():
        bad = factories.rollout(db, name="bad", policy=POLICY)
        good = factories.rollout(db, name="good", policy=POLICY)
        for rollout in (bad, good):
            service.transition(
                db, rollout_id=rollout.id, action=Action.START, actor="t", reason="t"
            )
        factories.seed_pairs(db, bad.id, 600, candidate_pass=0.6)
        factories.seed_pairs(db, good.id, 600, seed=2)
        expired = factories.pair(db, good.id, deadline_in_s=-5)
    assert judge_running(sessions, publisher=None) == 2
    assert sweep_pairs(sessions, [].extend, Settings()) == 1
    with sessions() as db:
        states = {r.name: r.state for r in service.repository.list_rollouts(db)}
        assert states == {"bad": RolloutState.KILLED, "good": RolloutState.RUNNING}
        assert db.get(type(expired), expired.id).state.value == "dropped"
    assert judge_running(sessions, publisher=None) == 1, "a killed rollout is not judged again"


def test_the_loop_runs_each_job_at_its_interval_and_survives_failures():
    runs: list[str] = []

    def boom() -> None:
        runs.append("boom")
        raise RuntimeError("job failed")

    loop = PeriodicLoop([Job("fast", 0.05, lambda: runs.append("fast")), Job("boom", 0.1, boom)])
    loop.start()
    try:
        # Both keep running at their intervals, the failing one too (however loaded the host).
        assert wait_until(lambda: runs.count("fast") >= 5 and runs.count("boom") >= 2, 30)
    finally:
        loop.stop()


def test_beat_schedules_the_gate_tasks(tmp_path):
    from gate.worker.app import make_celery

    settings = Settings(
        home=tmp_path,
        database_url=f"sqlite:///{tmp_path}/x.db",
        redis_url="redis://127.0.0.1:6379/15",
        gate_interval_s=42,
        traffic_interval_s=7,
    )
    app = make_celery(settings)
    schedule = app.conf.beat_schedule
    assert schedule["specgate.gate_all"]["schedule"] == 42
    assert schedule["specgate.controller_watch"]["schedule"] == 42
    assert schedule["specgate.drive_traffic"]["schedule"] == 7
    for name in (
        "specgate.gate_all",
        "specgate.controller_watch",
        "specgate.drive_traffic",
        "specgate.sweep_pairs",
        "specgate.scrape",
        "specgate.weekly_report",
    ):
        assert name in app.tasks, name


def test_the_sweep_catches_up_completions_and_evaluations_a_failure_lost(sqlite_url, tmp_path):
    sessions = session_factory(make_engine(sqlite_url))
    with sessions() as db, db.begin():
        rollout = factories.rollout(db)
        missed = factories.pair(db, rollout.id, deadline_in_s=-5)  # both sides, never completed
        factories.generation(db, missed, Cohort.BASELINE)
        factories.generation(db, missed, Cohort.CANDIDATE)
        lost = factories.pair(db, rollout.id)  # completed, its evaluation never ran
        lost.state, lost.completed_at = PairState.COMPLETE, utcnow() - timedelta(minutes=10)
        given_up = factories.pair(db, rollout.id)
        given_up.state, given_up.completed_at = PairState.COMPLETE, utcnow() - timedelta(hours=9)
        given_up.requeues = 5
    enqueued: list = []
    settings = Settings(home=tmp_path, database_url=sqlite_url, pair_requeue_after_s=60)
    assert sweep_pairs(sessions, enqueued.extend, settings) == 0
    assert sorted(enqueued) == sorted([missed.id, lost.id])
    assert sweep_pairs(sessions, enqueued.extend, settings) == 0 and len(enqueued) == 2
    with sessions() as db:
        assert db.get(type(missed), missed.id).state is PairState.COMPLETE
        waiting = store_status(db, max_requeues=5)  # what `specgate status` shows
        assert waiting.awaiting_evaluation == 3 and (waiting.oldest_awaiting_s or 0) >= 9 * 3600
        assert waiting.requeues_exhausted == 1
