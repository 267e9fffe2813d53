"""A rollout with several candidate routes (arms) through the control API: create it, add
an arm mid-run, kill one arm with its reason while the others go on (issue 40)."""

from __future__ import annotations

from typing import Any

import pytest

from gate.routing.snapshot import load_snapshot
from gate.verdicts.service import run_gate
from tests import factories

pytestmark = pytest.mark.postgres


def post(api, path, body, who="admin"):
    return api.client.post(path, json=body, headers=api.headers(who))


def routes(api, *names, role="candidate"):
    for name in names:
        spec = {"name": name, "base_url": f"http://{name}:8000/v1", "model": "m", "role": role}
        assert post(api, "/v1/routes", spec).status_code in (200, 201)


def armed(api, name="armed", arms=("k2", "k4"), **extra):
    routes(api, "plain", role="baseline")
    routes(api, *[f"ngram-{arm}" for arm in arms])
    body = {
        "name": name,
        "alias": name,
        "baseline_route": "plain",
        "arms": [{"name": arm, "route": f"ngram-{arm}"} for arm in arms],
        "policy": {"stages": [100]},
        **extra,
    }
    return post(api, "/v1/rollouts", body)


def audit(api, rid):
    trail = api.client.get(f"/v1/audit?rollout_id={rid}", headers=api.headers("read")).json()
    return [(e["action"], e["reason"], e["details"].get("arm")) for e in reversed(trail)]


def test_a_rollout_is_created_with_its_arms_and_the_first_as_its_candidate(api):
    made = armed(api)
    assert made.status_code == 201, made.text
    body = made.json()
    assert [(a["name"], a["route"], a["state"]) for a in body["arms"]] == [
        ("k2", "ngram-k2", "active"),
        ("k4", "ngram-k4", "active"),
    ]
    assert body["candidate_route_id"] == body["arms"][0]["route_id"]
    single = api.client.get(f"/v1/rollouts/{api.rollout_id}", headers=api.headers("read"))
    assert single.json()["arms"] == []


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"candidate_route": "ngram-k2"}, "exactly one of candidate_route or arms"),
        ({"arms": []}, "give 1 to 8 arms"),
        ({"arms": [{"name": "a", "route": "ngram-k2"}] * 2}, "a given twice"),
        ({"arms": [{"name": "a", "route": "x"}, {"name": "b", "route": "x"}]}, "own route"),
        ({"arms": [{"name": "has space", "route": "ngram-k2"}]}, "pattern"),
        ({"mode": "canary"}, "shadow mode only"),
    ],
)
def test_bad_arms_are_a_422_that_says_why(api, change, words):
    routes(api, "plain", role="baseline")
    routes(api, "ngram-k2", "x")
    arms = [{"name": "k2", "route": "ngram-k2"}]
    body = {"name": "r", "alias": "r", "baseline_route": "plain", "arms": arms} | change
    refused = post(api, "/v1/rollouts", body)
    assert refused.status_code == 422 and words in refused.text


def test_an_arm_route_that_is_missing_or_a_baseline_is_a_400(api):
    routes(api, "plain", role="baseline")
    for route, words in (("nowhere", "does not exist"), ("plain", "not a candidate one")):
        body = {"name": "r", "alias": "r", "baseline_route": "plain"}
        refused = post(api, "/v1/rollouts", body | {"arms": [{"name": "a", "route": route}]})
        assert refused.status_code == 400 and words in refused.text


def test_an_arm_is_added_mid_run_and_audited(api):
    rid = armed(api).json()["id"]
    running = post(api, f"/v1/rollouts/{rid}/start", {"reason": "go"}).json()
    routes(api, "ngram-k8")
    added = post(
        api, f"/v1/rollouts/{rid}/arms", {"name": "k8", "route": "ngram-k8", "reason": "wider k"}
    )
    assert added.status_code == 201, added.text
    assert [a["name"] for a in added.json()["arms"]] == ["k2", "k4", "k8"]
    assert added.json()["version"] > running["version"]  # gateways reload the arms
    assert added.json()["state"] == "running"
    assert ("arm.add", "wider k", "k8") in audit(api, rid)
    again = post(
        api, f"/v1/rollouts/{rid}/arms", {"name": "k8b", "route": "ngram-k8", "reason": "x"}
    )
    assert again.status_code == 409 and "already has arm 'k8'" in again.text
    named = post(
        api, f"/v1/rollouts/{rid}/arms", {"name": "k2", "route": "ngram-k8", "reason": "x"}
    )
    assert named.status_code == 409


def test_an_arm_is_refused_on_a_rollout_of_one_candidate_or_a_finished_one(api):
    routes(api, "ngram-k8")
    one = post(
        api,
        f"/v1/rollouts/{api.rollout_id}/arms",
        {"name": "k8", "route": "ngram-k8", "reason": "x"},
    )
    assert one.status_code == 409 and "has one candidate" in one.text
    rid = armed(api).json()["id"]
    post(api, f"/v1/rollouts/{rid}/kill", {"reason": "stop"}, who="operate")
    late = post(api, f"/v1/rollouts/{rid}/arms", {"name": "k8", "route": "ngram-k8", "reason": "x"})
    assert late.status_code == 409 and "killed" in late.text
    assert (
        post(
            api, "/v1/rollouts/999/arms", {"name": "k8", "route": "ngram-k8", "reason": "x"}
        ).status_code
        == 404
    )


def test_one_arm_is_killed_with_its_reason_and_the_others_go_on(api):
    rid = armed(api, arms=("k2", "k4", "k8")).json()["id"]
    post(api, f"/v1/rollouts/{rid}/start", {"reason": "go"})
    killed = post(api, f"/v1/rollouts/{rid}/arms/k4/kill", {"reason": "quality -5"}, who="operate")
    assert killed.status_code == 200, killed.text
    body = killed.json()
    assert body["state"] == "running"
    assert {a["name"]: a["state"] for a in body["arms"]} == {
        "k2": "active", "k4": "killed", "k8": "active"
    }  # fmt: skip
    assert [a["name"] for a in body["arms"] if a["killed_at"]] == ["k4"]
    again = post(api, f"/v1/rollouts/{rid}/arms/k4/kill", {"reason": "again"}, who="operate")
    assert again.json()["version"] == body["version"]  # a no-op
    assert (
        post(api, f"/v1/rollouts/{rid}/arms/k5/kill", {"reason": "x"}, who="operate").status_code
        == 404
    )
    assert (
        post(api, f"/v1/rollouts/{rid}/arms/k2/kill", {"reason": "x"}, who="read").status_code
        == 403
    )
    post(api, f"/v1/rollouts/{rid}/arms/k2/kill", {"reason": "slower"}, who="operate")
    last = post(api, f"/v1/rollouts/{rid}/arms/k8/kill", {"reason": "x"}, who="operate")
    assert last.status_code == 409 and "kill the rollout instead" in last.text
    assert [(a, r, n) for a, r, n in audit(api, rid) if a == "arm.kill"] == [
        ("arm.kill", "quality -5", "k4"),
        ("arm.kill", "slower", "k2"),
    ]
    show = api.client.get(f"/v1/rollouts/{rid}", headers=api.headers("read")).json()
    assert show["state"] == "running"  # an arm's kill is not the rollout's


def test_the_global_kill_still_stops_a_rollout_with_arms(api):
    rid = armed(api).json()["id"]
    post(api, f"/v1/rollouts/{rid}/start", {"reason": "go"})
    post(api, f"/v1/rollouts/{rid}/arms/k2/kill", {"reason": "slow"}, who="operate")
    killed = post(api, "/v1/kill", {"reason": "incident"}, who="operate").json()
    assert {r["id"]: r["state"] for r in killed}[rid] == "killed"


def test_the_final_promotion_needs_one_active_arm_and_makes_it_the_candidate(api):
    made = armed(api).json()
    rid = made["id"]
    post(api, f"/v1/rollouts/{rid}/start", {"reason": "go"})
    refused = post(api, f"/v1/rollouts/{rid}/promote", {"reason": "ship"})
    assert refused.status_code == 409 and "kill all but the winner" in refused.text
    post(api, f"/v1/rollouts/{rid}/arms/k2/kill", {"reason": "slower"}, who="operate")
    promoted = post(api, f"/v1/rollouts/{rid}/promote", {"reason": "ship k4"}).json()
    assert promoted["state"] == "promoted"
    assert promoted["candidate_route_id"] == made["arms"][1]["route_id"]


def test_a_rollout_with_arms_stays_in_shadow_mode(api):
    made = armed(api).json()
    patch = {"version": made["version"], "mode": "canary"}
    refused = api.client.patch(
        f"/v1/rollouts/{made['id']}", json=patch, headers=api.headers("admin")
    )
    assert refused.status_code == 400 and "shadow mode" in refused.text


def test_the_gate_judges_each_arm_and_the_glance_and_promotion_follow_it(api, pg_committing):
    made, verdict = judged_three_arms(api, pg_committing, stages=[100])
    rid = made["id"]
    assert verdict.decision.value == "promote", verdict.summary
    look = api.client.get(f"/v1/rollouts/{rid}/glance", headers=api.headers("read")).json()
    arms = look["arms"]
    assert (arms["winner"], arms["leader"]) == ("k4", "k4")
    assert {a["arm"]: a["state"] for a in arms["arms"]} == {
        "k2": "running", "k4": "promoted", "k8": "killed"
    }  # fmt: skip
    k4 = next(a for a in arms["arms"] if a["arm"] == "k4")
    assert k4["interval"][0] <= k4["ratio"] <= k4["interval"][1] < 1
    promoted = post(api, f"/v1/rollouts/{rid}/promote", {"reason": "ship the winner"})
    assert promoted.status_code == 200, promoted.text
    assert promoted.json()["candidate_route_id"] == made["arms"][1]["route_id"]
    kills = [(r, n) for a, r, n in audit(api, rid) if a == "arm.kill"]
    assert [n for _, n in kills] == ["k8", "k2"]
    assert "won the best-arm choice" in kills[1][0]


def judged_three_arms(
    api, pg_committing, *, reallocate: bool = False, stages: list[int] | None = None
) -> tuple[dict[str, Any], Any]:
    """Return a started rollout of three arms (over two stages unless `stages`), judged
    once, and that verdict: k4 is the best arm, k2 proven behind it, k8 killed on its
    own (its quality)."""
    policy = {"segments": ["chat"], "warmup_pairs": 50, "min_pairs": 300, "min_duration_s": 0,
              "stages": stages or [50, 100], "arms": {"reallocate": reallocate}}  # fmt: skip
    made = armed(api, arms=("k2", "k4", "k8"), policy=policy).json()
    rid = made["id"]
    post(api, f"/v1/rollouts/{rid}/start", {"reason": "go"})
    with pg_committing() as db, db.begin():
        factories.seed_pairs(db, rid, 600, tpot_ratio=0.95, arm="k2", seed=1)
        factories.seed_pairs(db, rid, 600, tpot_ratio=0.7, arm="k4", seed=2)
        factories.seed_pairs(db, rid, 600, candidate_pass=0.6, arm="k8", seed=3)
    with pg_committing() as db, db.begin():
        verdict = run_gate(db, rollout_id=rid, publisher=None)
    return made, verdict


def snapshot_weights(pg_committing, rid: int) -> dict[str, float]:
    with pg_committing() as db:
        snapshot = load_snapshot(db, loaded_at=0.0)
    routing = next(r for r in snapshot.by_alias.values() if r.rollout_id == rid)
    return {arm.name: arm.weight for arm in routing.arms}


def test_a_stage_advance_reallocates_from_the_stored_choice(api, pg_committing):
    rid = judged_three_arms(api, pg_committing, reallocate=True)[0]["id"]
    assert snapshot_weights(pg_committing, rid) == {"k2": 1.0, "k4": 1.0}  # until the stage
    advanced = post(api, f"/v1/rollouts/{rid}/promote", {"reason": "next stage"})
    assert advanced.status_code == 200 and advanced.json()["stage"] == 1, advanced.text
    assert snapshot_weights(pg_committing, rid) == {"k2": 0.25, "k4": 1.0}
    assert {a["name"]: a["weight"] for a in advanced.json()["arms"]}["k2"] == 0.25
    trail = api.client.get(f"/v1/audit?rollout_id={rid}", headers=api.headers("read")).json()
    event = next(e for e in trail if e["action"] == "arm.reallocate")
    assert event["details"]["weights"] == {"k2": 0.25, "k4": 1.0}
    assert event["details"]["behind"] == {"k2": ["k4"]}
    assert "'k2' is proven behind 'k4'" in event["reason"]
    look = api.client.get(f"/v1/rollouts/{rid}/glance", headers=api.headers("read")).json()
    assert look["shares"] == {"k2": 0.2, "k4": 0.8}


def test_a_stage_advance_without_reallocate_keeps_equal_shares(api, pg_committing):
    rid = judged_three_arms(api, pg_committing, reallocate=False)[0]["id"]
    advanced = post(api, f"/v1/rollouts/{rid}/promote", {"reason": "next stage"})
    assert advanced.status_code == 200 and advanced.json()["stage"] == 1, advanced.text
    assert snapshot_weights(pg_committing, rid) == {"k2": 1.0, "k4": 1.0}
    trail = api.client.get(f"/v1/audit?rollout_id={rid}", headers=api.headers("read")).json()
    assert "arm.reallocate" not in {e["action"] for e in trail}
    look = api.client.get(f"/v1/rollouts/{rid}/glance", headers=api.headers("read")).json()
    assert look["shares"] == {"k2": 0.5, "k4": 0.5}
