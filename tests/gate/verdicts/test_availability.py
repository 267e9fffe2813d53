"""A candidate that cannot answer is failing: `specgate serve` (gateway, collector, periodic
gate) in front of a candidate route that refuses every connection, traffic flowing, until
the gate kills the rollout with a reason in words, by time or by the failure guardrail."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select

from gate.db import migrate
from gate.db.base import utcnow
from gate.db.engine import make_engine, session_factory
from gate.db.enums import Cohort, Decision, GenerationStatus, RolloutMode, RolloutState
from gate.db.models import AuditEvent, Generation, Verdict
from gate.engines.sim import SimProfile, create_sim_app
from gate.rollouts import service
from gate.rollouts.states import Action
from gate.routing.health import ROUTE_DOWN
from gate.verdicts import availability
from gate.verdicts.service import run_gate
from tests import factories
from tests.gate.api.test_processes import specgate_serve
from tests.servers import TcpProxy, closed_port, serving
from tests.waits import wait_until

# A fast gate; the candidate route stays down for the whole test, so with the default
# back-off (5 s, doubling to 60 s) nearly every call skips it and only a few are probes.
ENV = {"SPECGATE_CONTROL_RATE": "0", "SPECGATE_GATE_INTERVAL_S": "0.3"}
POLICY: dict[str, Any] = {"segments": ["chat"], "stages": [100], "min_duration_s": 0}


@contextmanager
def down_candidate(
    tmp_path,
    policy: dict[str, Any],
    mode: RolloutMode = RolloutMode.SHADOW,
    candidate_url: str | None = None,
) -> Iterator[Any]:
    """Serve a rollout whose candidate refuses connections (or is at `candidate_url`);
    yield (gateway URL, sessions, id)."""
    url = f"sqlite:///{tmp_path}/store.db"
    migrate.upgrade(url)
    sessions = session_factory(make_engine(url))
    with serving(create_sim_app(SimProfile(tokens=8))) as base:
        with sessions() as db, db.begin():
            rollout = factories.rollout(
                db,
                name="smol",
                mode=mode,
                base_url=base + "/v1",
                candidate_url=candidate_url or f"http://127.0.0.1:{closed_port()}/v1",
                sample_rate=1.0,
                policy={**POLICY, **policy},
            )
            service.transition(
                db, rollout_id=rollout.id, action=Action.START, actor="t", reason="t"
            )
        env = {"SPECGATE_HOME": str(tmp_path), **ENV}
        with specgate_serve(url, embedded=True, **env) as gateway:
            yield gateway, sessions, rollout.id


@contextmanager
def traffic(gateway: str) -> Iterator[list[int]]:
    """Send requests one after another until the block ends; yield the count so far."""
    sent, stop = [0], threading.Event()
    client = openai.OpenAI(base_url=gateway + "/v1", api_key="x", max_retries=0)

    def run() -> None:
        while not stop.is_set():
            client.chat.completions.create(
                model="smol", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
            sent[0] += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield sent
    finally:
        stop.set()
        thread.join(10)


def killed(sessions: Any, rollout_id: int) -> bool:
    with sessions() as db:
        return service.get_rollout(db, rollout_id=rollout_id).state is RolloutState.KILLED


def gate_kill(sessions: Any, rollout_id: int) -> tuple[Verdict, AuditEvent]:
    with sessions() as db:
        verdict = db.scalars(
            select(Verdict).where(Verdict.rollout_id == rollout_id).order_by(Verdict.id.desc())
        ).first()
        kill = db.scalars(select(AuditEvent).where(AuditEvent.action == "kill")).one()
    assert verdict is not None
    return verdict, kill


@pytest.mark.parametrize(
    ("mode", "status"),
    [(RolloutMode.SHADOW, GenerationStatus.ERROR), (RolloutMode.CANARY, GenerationStatus.FALLBACK)],
)
def test_a_candidate_down_beyond_the_policy_s_limit_is_killed_in_words(tmp_path, mode, status):
    # Warm-up far away: only the time can kill here (pairs alone would say continue).
    policy = {"warmup_pairs": 100_000, "max_candidate_down_s": 2.0}
    with down_candidate(tmp_path, policy, mode) as (gateway, sessions, rollout_id):
        with traffic(gateway) as sent:
            assert wait_until(lambda: killed(sessions, rollout_id), timeout=60), sent
        metrics = httpx.get(gateway + "/metrics").text
    verdict, kill = gate_kill(sessions, rollout_id)
    assert verdict.decision is Decision.KILL
    assert verdict.reason_codes == ["kill:candidate_down"]
    assert verdict.summary.startswith("kill: the candidate route has not answered for ")
    assert "beyond the policy's 2.0 s (max_candidate_down_s)" in verdict.summary
    assert "the pairs alone say: continue" in verdict.summary.lower()
    assert kill.actor == "gate" and kill.reason == verdict.summary
    assert 'specgate_gateway_route_down{route="smol-spec"} 1.0' in metrics
    with sessions() as db:
        skipped = db.scalars(
            select(Generation).where(
                Generation.cohort == Cohort.CANDIDATE, Generation.error == ROUTE_DOWN
            )
        ).all()
    # The skipped calls are the candidate's route failures, never `dropped`.
    assert skipped and {g.status for g in skipped} == {status}


def test_a_down_candidate_fails_the_failure_guardrail(tmp_path):
    # The time limit far away: the skipped calls themselves prove the candidate fails.
    policy = {"warmup_pairs": 20, "min_pairs": 300, "max_candidate_down_s": 86_400.0}
    with (
        down_candidate(tmp_path, policy) as (gateway, sessions, rollout_id),
        traffic(gateway) as sent,
    ):
        assert wait_until(lambda: killed(sessions, rollout_id), timeout=90), sent
    verdict, kill = gate_kill(sessions, rollout_id)
    assert verdict.decision is Decision.KILL and kill.actor == "gate"
    assert "kill:failures:all" in verdict.reason_codes, verdict.reason_codes
    assert "hold:dropped_share" not in verdict.reason_codes


def skipped_since(db: Any, rollout_id: int, start: datetime, seconds: list[float]) -> None:
    """Store candidate calls skipped as down, `seconds` after `start`."""
    for s in seconds:
        db.add(
            Generation(
                rollout_id=rollout_id,
                cohort=Cohort.CANDIDATE,
                status=GenerationStatus.ERROR,
                error=ROUTE_DOWN,
                started_at=start + timedelta(seconds=s),
            )
        )
    db.flush()


def started_at(db: Any, rollout_id: int, when: datetime) -> None:
    """Date the rollout's start back to `when` (its calls below are that old)."""
    where = (AuditEvent.rollout_id == rollout_id, AuditEvent.action == "start")
    start = db.scalars(select(AuditEvent).where(*where)).one()
    start.created_at = when - timedelta(seconds=1)
    db.flush()


@pytest.mark.parametrize("store", ["sqlite_session", "pg_session"])
def test_down_time_counts_from_the_candidate_s_last_answer(request, store):
    db = request.getfixturevalue(store)
    rollout = factories.rollout(db, policy=POLICY)
    service.transition(db, rollout_id=rollout.id, action=Action.START, actor="t", reason="t")
    start = utcnow() - timedelta(hours=1)
    started_at(db, rollout.id, start)
    skipped_since(db, rollout.id, start, [0, 100])  # an old outage, then it answered
    pair = factories.pair(db, rollout.id)
    factories.generation(db, pair, Cohort.CANDIDATE).started_at = start + timedelta(seconds=200)
    skipped_since(db, rollout.id, start, [300, 450, 590])
    down = availability.outage(db, rollout_id=rollout.id)
    assert down is not None and down.skipped == 3 and down.down_s == pytest.approx(290)
    assert run_gate(db, rollout_id=rollout.id, publisher=None).decision is Decision.CONTINUE
    skipped_since(db, rollout.id, start, [610])  # 310 s down: past the default 300 s
    verdict = run_gate(db, rollout_id=rollout.id, publisher=None)
    assert verdict.reason_codes == ["kill:candidate_down"]
    assert "has not answered for 5 min: the gateway skipped 4 call(s)" in verdict.summary
    assert service.get_rollout(db, rollout_id=rollout.id).state is RolloutState.KILLED


def candidate_calls(sessions: Any, rollout_id: int, status: GenerationStatus) -> int:
    with sessions() as db:
        return len(
            db.scalars(
                select(Generation.id).where(
                    Generation.rollout_id == rollout_id,
                    Generation.cohort == Cohort.CANDIDATE,
                    Generation.status == status,
                )
            ).all()
        )


def test_one_refused_connection_is_not_a_kill(tmp_path):
    """A candidate that refuses one connection and answers the probe after the back-off
    had a blip: the calls skipped in between are not its failures (the route was never
    proven down), so the failure guardrail does not kill a candidate that answers."""
    # Dropped pairs are not this test's question: only a kill is.
    policy = {"warmup_pairs": 20, "min_pairs": 100_000, "max_dropped_share": 1.0}
    with serving(create_sim_app(SimProfile(tokens=8))) as engine:
        port = int(engine.rsplit(":", 1)[1])
        proxy = TcpProxy("127.0.0.1", port)
        url = f"http://127.0.0.1:{proxy.port}/v1"
        with down_candidate(tmp_path, policy, candidate_url=url) as (gateway, sessions, rid):
            with traffic(gateway) as sent:
                ok = GenerationStatus.OK
                assert wait_until(lambda: candidate_calls(sessions, rid, ok) >= 60, 60), sent
                proxy.close()  # the blip: the listener is gone, connections are refused
                # Back as soon as the gateway has marked the route down, so the probe after
                # the back-off finds it: the gateway's own gauge, not the store, which may
                # lag the back-off on a loaded host (the probe refused too is a real outage).
                assert wait_until(lambda: route_down(gateway), 30), sent
                proxy = TcpProxy("127.0.0.1", port, listen_port=proxy.port)
                failed = GenerationStatus.ERROR
                assert wait_until(lambda: candidate_calls(sessions, rid, failed) >= 1, 30)
                answered = candidate_calls(sessions, rid, ok)
                more = lambda: candidate_calls(sessions, rid, ok) >= answered + 300  # noqa: E731
                assert wait_until(lambda: killed(sessions, rid) or more(), 120), sent
            # Traffic stopped: wait for the gate to judge every pair stored.
            assert wait_until(lambda: killed(sessions, rid) or gated_after(sessions, rid), 30)
        proxy.close()
    with sessions() as db:
        verdicts = db.scalars(select(Verdict).where(Verdict.rollout_id == rid)).all()
    assert not killed(sessions, rid), [(v.decision, v.reason_codes) for v in verdicts[-3:]]
    assert candidate_calls(sessions, rid, GenerationStatus.ERROR) <= 3  # the refused calls


def route_down(gateway: str) -> bool:
    """Whether the gateway reports the candidate route down (its in-process gauge)."""
    metrics = httpx.get(gateway + "/metrics").text
    return 'specgate_gateway_route_down{route="smol-spec"} 1.0' in metrics


def gated_after(sessions: Any, rollout_id: int) -> bool:
    """Whether the gate has judged the pairs stored so far (a verdict newer than them)."""
    with sessions() as db:
        newest = db.scalar(
            select(Generation.started_at)
            .where(Generation.rollout_id == rollout_id)
            .order_by(Generation.started_at.desc())
            .limit(1)
        )
        verdict = db.scalars(
            select(Verdict).where(Verdict.rollout_id == rollout_id).order_by(Verdict.id.desc())
        ).first()
    return verdict is not None and newest is not None and verdict.created_at > newest


@pytest.mark.parametrize("store", ["sqlite_session", "pg_session"])
def test_down_time_counts_from_the_rollout_s_resume(request, store):
    """Calls skipped before a hold are not part of the outage after the resume: nobody
    asked the candidate while the rollout was held, so that hour is not down time."""
    db = request.getfixturevalue(store)
    rollout = factories.rollout(db, policy=POLICY)
    service.transition(db, rollout_id=rollout.id, action=Action.START, actor="t", reason="t")
    start = utcnow() - timedelta(hours=1)
    skipped_since(db, rollout.id, start, [0, 10])  # down an hour ago; then held
    for action in (Action.HOLD, Action.RESUME):  # an hour later, a person resumes it
        service.transition(db, rollout_id=rollout.id, action=action, actor="op", reason="x")
    skipped_since(db, rollout.id, utcnow(), [0, 1])  # still down at the resume: 1 s so far
    down = availability.outage(db, rollout_id=rollout.id)
    assert down is not None and down.skipped == 2 and down.down_s < 60
    verdict = run_gate(db, rollout_id=rollout.id, publisher=None)
    assert verdict.decision is not Decision.KILL, verdict.summary
