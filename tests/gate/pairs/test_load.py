"""A pair's load at its start, on Postgres: the engine's running-requests gauge interpolated
between scrapes, else the in-flight counts summed over gateway replicas; stamped once."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from gate.db.base import utcnow
from gate.db.enums import Cohort, PairState
from gate.db.models import EngineSample, RequestRecord, RolloutArm
from gate.pairs.export import pair_records
from gate.pairs.load import RUNNING, pair_loads
from gate.pairs.watermark import stamp_evaluated
from gate.rollouts import repository, service
from gate.rollouts.schemas import RouteIn
from tests import factories

pytestmark = pytest.mark.postgres
T0 = utcnow().replace(microsecond=0)


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def request(session, rollout_id, seconds, replica, baseline, candidate=0):
    row = RequestRecord(
        id=uuid.uuid4(),
        rollout_id=rollout_id,
        created_at=at(seconds),
        gateway_replica=replica,
        inflight_baseline=baseline,
        inflight_candidate=candidate,
    )
    session.add(row)
    session.flush()
    return row


def pair(session, rollout_id, seconds, req=None):
    row = factories.pair(session, rollout_id)
    row.created_at, row.request_id = at(seconds), None if req is None else req.id
    session.flush()
    return row


def gauge(session, route_id, seconds, value, metric=RUNNING):
    session.add(
        EngineSample(
            route_id=route_id, metric=metric, labels={}, value=value, scraped_at=at(seconds)
        )
    )


def test_the_engine_gauge_is_interpolated_at_the_pair_start(pg_session):
    rollout = factories.rollout(pg_session)
    gauge(pg_session, rollout.baseline_route_id, 0, 2.0)
    gauge(pg_session, rollout.baseline_route_id, 10, 6.0)
    gauge(pg_session, rollout.baseline_route_id, 5, 99.0, metric="requests_waiting")
    gauge(pg_session, rollout.candidate_route_id, 4, 1.0)
    mine = pair(pg_session, rollout.id, 2.5, request(pg_session, rollout.id, 2.5, "a", 7, 3))
    (found,) = pair_loads(pg_session, rollout_id=rollout.id)
    assert found.pair_id == mine.id
    assert (found.baseline.value, found.baseline.source) == (3.0, "engine")
    # One scrape before the start and none after: the gateway's count stands in.
    assert (found.candidate.value, found.candidate.source) == (3.0, "gateway")


def test_without_scrapes_the_counts_are_summed_over_gateway_replicas(pg_session):
    rollout = factories.rollout(pg_session)
    own = request(pg_session, rollout.id, 100, "a", 3, 1)
    request(pg_session, rollout.id, 95, "b", 5, 2)  # b's latest before the start: counted
    request(pg_session, rollout.id, 90, "b", 40, 40)  # an older count of b: superseded
    request(pg_session, rollout.id, 50, "c", 9, 9)  # c's count is stale (> 30 s before)
    request(pg_session, rollout.id, 101, "d", 8, 8)  # d's comes after the start
    request(pg_session, rollout.id, 99, None, 6, 6)  # an unnamed replica cannot be summed
    mine = pair(pg_session, rollout.id, 100, own)
    alone = pair(pg_session, rollout.id, 200)  # no request recorded
    loads = {load.pair_id: load for load in pair_loads(pg_session, rollout_id=rollout.id)}
    assert (loads[mine.id].baseline.value, loads[mine.id].candidate.value) == (8.0, 3.0)
    assert loads[mine.id].baseline.source == "gateway"
    assert (loads[alone.id].baseline.value, loads[alone.id].baseline.source) == (None, "none")
    wider = pair_loads(pg_session, rollout_id=rollout.id, max_gap_s=60)
    assert next(x for x in wider if x.pair_id == mine.id).baseline.value == 17.0  # c counts


def test_a_load_is_stamped_once_and_exported_as_stamped(pg_session):
    # Stamped before the candidate's next scrape exists: the gateway's count stands in,
    # and stays, so the fold and a replay of the export read the same load.
    rollout = factories.rollout(pg_session)
    gauge(pg_session, rollout.baseline_route_id, 0, 2.0)
    gauge(pg_session, rollout.baseline_route_id, 10, 6.0)
    gauge(pg_session, rollout.candidate_route_id, 0, 1.0)
    mine = pair(pg_session, rollout.id, 5, request(pg_session, rollout.id, 5, "a", 7, 3))
    mine.state = PairState.COMPLETE
    for cohort in (Cohort.BASELINE, Cohort.CANDIDATE):
        factories.generation(pg_session, mine, cohort)
    pg_session.flush()
    assert stamp_evaluated(pg_session, pair_ids=[mine.id]) == 1
    gauge(pg_session, rollout.candidate_route_id, 10, 9.0)  # the scrape after, too late
    pg_session.flush()
    (now,) = pair_loads(pg_session, rollout_id=rollout.id)
    assert (now.candidate.value, now.candidate.source) == (5.0, "engine")
    pg_session.refresh(mine)
    assert (mine.baseline_load, mine.baseline_load_source) == (4.0, "engine")
    assert (mine.candidate_load, mine.candidate_load_source) == (3.0, "gateway")
    (record,) = pair_records(pg_session, rollout_id=rollout.id)
    assert (record["baseline"]["load"], record["candidate"]["load"]) == (4.0, 3.0)


def test_a_pair_of_an_arm_reads_its_arms_route(pg_session):
    rollout = factories.rollout(pg_session)
    service.create_route(
        pg_session,
        spec=RouteIn(name="k8", base_url="http://127.0.0.1:9/v1", model="m", role="candidate"),
        actor="test",
    )
    rollout.arms = [
        RolloutArm(name="k2", route_id=rollout.candidate_route_id),
        RolloutArm(name="k8", route_id=repository.get_route_by_name(pg_session, "k8").id),
    ]
    pg_session.flush()
    for route_id, value in ((rollout.candidate_route_id, 1.0), (rollout.arms[1].route_id, 9.0)):
        gauge(pg_session, route_id, 0, value)
        gauge(pg_session, route_id, 10, value)
    first, second = pair(pg_session, rollout.id, 2), pair(pg_session, rollout.id, 3)
    first.arm, second.arm = "k2", "k8"
    pg_session.flush()
    loads = {p.pair_id: p.candidate.value for p in pair_loads(pg_session, rollout_id=rollout.id)}
    assert loads == {first.id: 1.0, second.id: 9.0}
