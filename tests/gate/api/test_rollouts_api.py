"""The kill switch and rollout life cycle through the API, as an SRE uses it."""

from __future__ import annotations

import asyncio

import pytest

from gate.db.enums import Cohort
from tests import factories

pytestmark = pytest.mark.postgres


def post(api, path, body, who="admin", **headers):
    return api.client.post(path, json=body, headers={**api.headers(who), **headers})


def test_kill_resume_promote_with_audit(api):
    rid = api.rollout_id
    assert post(api, f"/v1/rollouts/{rid}/start", {"reason": "go"}).json()["state"] == "running"
    killed = post(api, f"/v1/rollouts/{rid}/kill", {"reason": "p99 TTFT"}, who="operate")
    assert killed.status_code == 200 and killed.json()["state"] == "killed"
    again = post(api, f"/v1/rollouts/{rid}/kill", {"reason": "again"}, who="operate")
    assert again.json()["state"] == "killed" and again.json()["version"] == killed.json()["version"]
    refused = post(api, f"/v1/rollouts/{rid}/promote", {"reason": "ship it"})
    assert refused.status_code == 409 and "cannot promote a rollout that is killed" in refused.text
    post(api, f"/v1/rollouts/{rid}/resume", {"reason": "fixed"}, who="operate")
    assert post(api, f"/v1/rollouts/{rid}/promote", {"reason": "ok"}).json()["state"] == "promoted"
    trail = api.client.get(f"/v1/audit?rollout_id={rid}", headers=api.headers("read")).json()
    assert [(e["action"], e["actor"]) for e in reversed(trail)] == [
        ("create", "test"),
        ("start", "key:admin"),
        ("kill", "key:operate"),
        ("resume", "key:operate"),
        ("promote", "key:admin"),
    ]
    assert (trail[1]["reason"], trail[2]["reason"]) == ("fixed", "p99 TTFT")


def test_a_kill_is_published_after_commit(api):
    seen = []

    async def listen():
        async for change in api.bus.changes():
            seen.append(change)
            return

    async def scenario():
        task = asyncio.ensure_future(listen())
        await asyncio.sleep(0)
        await asyncio.to_thread(
            post, api, f"/v1/rollouts/{api.rollout_id}/kill", {"reason": "x"}, "operate"
        )
        await asyncio.wait_for(task, 2)

    asyncio.run(scenario())
    assert seen[0].rollout_id == api.rollout_id and seen[0].state == "killed"


def test_idempotency_key_replays_and_refuses_reuse(api):
    rid = api.rollout_id
    post(api, f"/v1/rollouts/{rid}/start", {"reason": "go"})
    first = post(
        api, f"/v1/rollouts/{rid}/hold", {"reason": "look"}, "operate", **{"Idempotency-Key": "k1"}
    )
    post(api, f"/v1/rollouts/{rid}/resume", {"reason": "go on"}, "operate")
    replay = post(
        api, f"/v1/rollouts/{rid}/hold", {"reason": "look"}, "operate", **{"Idempotency-Key": "k1"}
    )
    assert replay.json() == first.json() and replay.json()["state"] == "held"
    current = api.client.get(f"/v1/rollouts/{rid}", headers=api.headers("read")).json()
    assert current["state"] == "running", "a replay must not act again"
    reused = post(
        api, f"/v1/rollouts/{rid}/hold", {"reason": "other"}, "operate", **{"Idempotency-Key": "k1"}
    )
    assert reused.status_code == 409


def test_a_stale_version_gets_409(api):
    rid = api.rollout_id
    version = api.client.get(f"/v1/rollouts/{rid}", headers=api.headers("read")).json()["version"]
    ok = api.client.patch(
        f"/v1/rollouts/{rid}",
        json={"version": version, "sample_rate": 0.3},
        headers=api.headers("admin"),
    )
    assert ok.status_code == 200 and ok.json()["sample_rate"] == 0.3
    stale = api.client.patch(
        f"/v1/rollouts/{rid}",
        json={"version": version, "sample_rate": 0.9},
        headers=api.headers("admin"),
    )
    assert stale.status_code == 409 and stale.json()["code"] == "stale_version"


def test_global_kill(api):
    post(api, f"/v1/rollouts/{api.rollout_id}/start", {"reason": "go"})
    killed = post(api, "/v1/kill", {"reason": "incident 42"}, who="operate").json()
    assert [r["state"] for r in killed] == ["killed"]


def test_feedback_joins_the_served_generation(api, pg_committing):
    with pg_committing() as db, db.begin():
        pair = factories.pair(db, api.rollout_id)
        base = factories.generation(db, pair, Cohort.BASELINE)
        factories.generation(db, pair, Cohort.CANDIDATE)
        base.response_id = "chatcmpl-1"
    by_response = post(api, "/v1/feedback", {"response_id": "chatcmpl-1", "thumbs": -1}, "operate")
    assert by_response.status_code == 201 and by_response.json()["generation_id"] == base.id
    by_pair = post(api, "/v1/feedback", {"pair_id": str(pair.id), "escalated": True}, "operate")
    assert by_pair.json()["generation_id"] == base.id
    missing = post(api, "/v1/feedback", {"response_id": "nope", "thumbs": 1}, "operate")
    assert missing.status_code == 404
    bad = post(api, "/v1/feedback", {"response_id": "x", "thumbs": 5}, "operate")
    assert bad.status_code == 422 and "thumbs" in bad.json()["detail"]


def test_generations_page_with_a_cursor(api, pg_committing):
    with pg_committing() as db, db.begin():
        pair = factories.pair(db, api.rollout_id)
        made = [factories.generation(db, pair, Cohort.BASELINE).id for _ in range(5)]
    seen, cursor = [], None
    while True:
        query = "/v1/generations?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = api.client.get(query, headers=api.headers("read")).json()
        seen += [g["id"] for g in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(made, reverse=True)
    bad = api.client.get("/v1/generations?cursor=%%%", headers=api.headers("read"))
    assert bad.status_code == 400


def test_route_registration_is_idempotent_and_unused_routes_can_be_removed(api):
    spec = {"name": "rerun", "base_url": "http://spec:8000/v1", "model": "m", "role": "candidate"}
    created = post(api, "/v1/routes", spec)
    again = post(api, "/v1/routes", spec)
    assert (created.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == created.json()["id"]
    other = post(api, "/v1/routes", {**spec, "base_url": "http://other:8000/v1"})
    assert other.status_code == 409 and "another base_url" in other.json()["detail"]
    assert other.headers["content-type"] == "application/problem+json"
    admin = api.headers("admin")
    used = api.client.delete("/v1/routes/secret-rollout-base", headers=admin)
    assert used.status_code == 409 and "secret-rollout" in used.json()["detail"]
    assert used.headers["content-type"] == "application/problem+json"
    assert api.client.delete("/v1/routes/rerun", headers=admin).status_code == 204
    assert api.client.delete("/v1/routes/rerun", headers=admin).status_code == 404
    names = {r["name"] for r in api.client.get("/v1/routes", headers=admin).json()}
    assert "rerun" not in names and "secret-rollout-base" in names


@pytest.mark.parametrize("bad", [True, False, "0.3", [0.3]])
def test_a_sample_rate_of_another_json_type_is_a_422_and_changes_nothing(api, bad):
    rid = api.rollout_id
    before = api.client.get(f"/v1/rollouts/{rid}", headers=api.headers("read")).json()
    refused = api.client.patch(
        f"/v1/rollouts/{rid}",
        json={"version": before["version"], "sample_rate": bad},
        headers=api.headers("admin"),
    )
    assert refused.status_code == 422, refused.text
    after = api.client.get(f"/v1/rollouts/{rid}", headers=api.headers("read")).json()
    assert after == before
