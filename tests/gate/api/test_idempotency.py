"""Every POST of the control API honours Idempotency-Key over real HTTP: a retry replays the
first answer and acts once, the same key with another body is 409, old keys are purged."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from gate.api.idempotency import purge_keys
from gate.db.base import utcnow
from gate.db.enums import Cohort
from gate.db.models import Feedback, IdempotencyKey
from tests import factories

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def twice(live, path: str, body: dict, key: str, other: dict):
    headers = {"Idempotency-Key": key}
    first = live.http.post(path, json=body, headers=headers)
    retry = live.http.post(path, json=body, headers=headers)
    reused = live.http.post(path, json=other, headers=headers)
    assert first.status_code in (200, 201), first.text
    assert (retry.status_code, retry.json()) == (first.status_code, first.json())
    assert reused.status_code == 409 and reused.json()["code"] == "conflict", reused.text
    return first


def test_creates_feedback_and_the_global_kill_act_once_per_key(live, pg_committing):
    with pg_committing() as db, db.begin():
        served = factories.rollout(db, name="routes")
        answer = factories.generation(db, factories.pair(db, served.id), Cohort.BASELINE)
        answer.response_id = "resp-1"
    route = {"name": "r", "base_url": "http://127.0.0.1:9/v1", "model": "m", "role": "baseline"}
    twice(live, "/v1/routes", route, "route-1", {**route, "model": "other"})
    spec = {
        "name": "new",
        "alias": "new",
        "baseline_route": "routes-base",
        "candidate_route": "routes-spec",
    }
    created = twice(live, "/v1/rollouts", spec, "rollout-1", {**spec, "sample_rate": 0.5})
    live.http.post(f"/v1/rollouts/{created.json()['id']}/start", json={"reason": "go"})
    twice(
        live,
        "/v1/feedback",
        {"response_id": "resp-1", "thumbs": -1},
        "fb-1",
        {"response_id": "resp-1", "thumbs": 1},
    )
    killed = twice(live, "/v1/kill", {"reason": "incident"}, "kill-1", {"reason": "other"})
    assert {r["state"] for r in killed.json()} == {"killed"}

    with pg_committing() as db:
        assert db.scalar(select(func.count()).select_from(Feedback)) == 1
    assert [r["name"] for r in live.http.get("/v1/routes").json()].count("r") == 1


def test_keys_older_than_the_max_age_are_purged(live, pg_committing):
    for key in ("old", "new"):
        live.http.post("/v1/kill", json={"reason": "x"}, headers={"Idempotency-Key": key})
    with pg_committing() as db, db.begin():
        db.execute(
            update(IdempotencyKey)
            .where(IdempotencyKey.key == "old")
            .values(created_at=utcnow() - timedelta(days=2))
        )
    with pg_committing() as db, db.begin():
        assert purge_keys(db, max_age_s=86_400) == 1
    with pg_committing() as db:
        assert list(db.scalars(select(IdempotencyKey.key))) == ["new"]
