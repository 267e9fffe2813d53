"""Acknowledgements are commits: over real HTTP on Postgres, a 2xx means the row is there.

A deferred constraint trigger fires only at COMMIT, after the endpoint has returned: it
makes a commit fail on demand (rollouts named `doomed*`) or take a while (`slow*`), so the
tests see what the client is told when the very last step fails or lags.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text

from gate.routing.pubsub import RoutingChange
from tests import factories
from tests.gate.api.conftest import DEPLOYMENT

REFUSE = """
CREATE OR REPLACE FUNCTION specgate_test_refuse_commit() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.name LIKE 'doomed%' AND NEW.state = 'killed' THEN
        RAISE EXCEPTION 'commit refused on demand';
    END IF;
    IF NEW.name LIKE 'slow%' THEN
        PERFORM pg_sleep(0.1);
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER specgate_test_refuse_commit AFTER INSERT OR UPDATE ON rollouts
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION specgate_test_refuse_commit();
"""
UNREFUSE = """
DROP TRIGGER IF EXISTS specgate_test_refuse_commit ON rollouts;
DROP FUNCTION IF EXISTS specgate_test_refuse_commit();
"""


@pytest.fixture
def commit_faults(pg_engine: Engine) -> Iterator[None]:
    with pg_engine.begin() as connection:
        connection.execute(text(REFUSE))
    yield
    with pg_engine.begin() as connection:
        connection.execute(text(UNREFUSE))


def _rollout(pg_committing, name: str) -> int:
    with pg_committing() as db, db.begin():
        return factories.rollout(db, name=name, policy={"stages": [100]}).id


@pytest.mark.postgres
@pytest.mark.redis
def test_a_kill_whose_commit_fails_is_a_5xx_and_publishes_nothing(
    live, pg_committing, commit_faults
):
    doomed = _rollout(pg_committing, "doomed")
    fine = _rollout(pg_committing, "fine")
    for rollout_id in (doomed, fine):
        assert (
            live.http.post(f"/v1/rollouts/{rollout_id}/start", json={"reason": "go"}).status_code
            == 200
        )
        assert live.next_change().rollout_id == rollout_id

    answer = live.http.post(f"/v1/rollouts/{doomed}/kill", json={"reason": "x"})

    assert answer.status_code >= 500
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == "not_committed"
    assert live.http.get(f"/v1/rollouts/{doomed}").json()["state"] == "running"
    # Messages leave one publisher in order: if the next one is the second kill, the
    # refused kill was never published.
    assert live.http.post(f"/v1/rollouts/{fine}/kill", json={"reason": "x"}).status_code == 200
    assert live.next_change() == RoutingChange(fine, "killed", 3, DEPLOYMENT)


@pytest.mark.postgres
@pytest.mark.redis
def test_create_then_start_and_kill_then_get_read_their_writes(live, pg_committing, commit_faults):
    with pg_committing() as db, db.begin():
        factories.rollout(db, name="routes")
    for attempt in range(15):
        spec = {
            "name": f"slow-{attempt}",
            "alias": f"ryw-{attempt}",
            "baseline_route": "routes-base",
            "candidate_route": "routes-spec",
        }
        created = live.http.post("/v1/rollouts", json=spec)
        assert created.status_code == 201, created.text
        rollout_id = created.json()["id"]
        started = live.http.post(f"/v1/rollouts/{rollout_id}/start", json={"reason": "go"})
        assert started.status_code == 200, f"try {attempt}: {started.text}"
        killed = live.http.post(f"/v1/rollouts/{rollout_id}/kill", json={"reason": "x"})
        assert killed.status_code == 200
        assert live.http.get(f"/v1/rollouts/{rollout_id}").json()["state"] == "killed"
