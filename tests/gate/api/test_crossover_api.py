"""The crossover a rollout routed by load is routed by, in `GET /v1/rollouts/{id}/glance`:
what a router or an autoscaler reads beside the gateway's gauge."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest

from gate.rollouts import service
from gate.rollouts.states import Action
from tests import factories

pytestmark = pytest.mark.postgres
BY_LOAD = {"stages": [100], "promotion": {"route_by_load": True, "hysteresis": 2}}


def by_load_rollout(pg_committing, *, promote: bool) -> int:
    with pg_committing() as db, db.begin():
        rollout = factories.running_rollout(db, name="by-load", policy=BY_LOAD)
        if promote:
            service.transition(
                db, rollout_id=rollout.id, action=Action.PROMOTE, actor="t", reason="t"
            )
        return rollout.id


def glance(api, rollout_id: int) -> dict:
    answer = api.client.get(f"/v1/rollouts/{rollout_id}/glance", headers=api.headers("read"))
    assert answer.status_code == 200, answer.text
    return answer.json()


def record(api, rollout_id: int, run_at: datetime) -> None:
    body = {**copy.deepcopy(factories.rehearsal_summary()), "run_at": run_at.isoformat()}
    path = f"/v1/rollouts/{rollout_id}/rehearsals"
    assert api.client.post(path, json=body, headers=api.headers("admin")).status_code == 201


def test_the_glance_shows_the_crossover_per_segment_and_its_source(api, pg_committing):
    rollout_id = by_load_rollout(pg_committing, promote=True)
    missing = glance(api, rollout_id)["crossover"]
    assert missing["source"] == "missing" and missing["segments"] == {"all": {"crossover": 0,
        "low": None, "high": None, "text": ""}}  # fmt: skip
    measured = datetime.now(UTC).replace(microsecond=0)
    record(api, rollout_id, measured)
    shown = glance(api, rollout_id)["crossover"]
    assert shown["routing_by_load"] and shown["source"] == "rehearsal"
    assert shown["hysteresis"] == 2 and shown["max_age_s"] == 604800.0
    assert datetime.fromisoformat(shown["measured_at"]) == measured
    levels = {name: seg["crossover"] for name, seg in shown["segments"].items()}
    assert levels == {"all": 2, "copy": 2, "creative": 0}
    assert shown["segments"]["all"]["text"] == "between 2 and 8"


def test_a_stale_crossover_reads_as_zero_everywhere(api, pg_committing):
    rollout_id = by_load_rollout(pg_committing, promote=True)
    record(api, rollout_id, datetime.now(UTC) - timedelta(days=8))
    shown = glance(api, rollout_id)["crossover"]
    assert shown["source"] == "stale"
    assert {seg["crossover"] for seg in shown["segments"].values()} == {0}


def test_a_running_rollout_shows_what_promotion_will_route_by(api, pg_committing):
    rollout_id = by_load_rollout(pg_committing, promote=False)
    record(api, rollout_id, datetime.now(UTC))
    shown = glance(api, rollout_id)["crossover"]
    assert not shown["routing_by_load"] and shown["source"] == "rehearsal"
    assert glance(api, api.rollout_id)["crossover"] is None  # promotion sends everything
