"""A bad gate policy is a clear 422 on create and on PATCH, over real HTTP: nothing stored,
and the client's keep-alive connection keeps working."""

from __future__ import annotations

import pytest

from evaluators.service import evaluate_pair
from gate.db.enums import Cohort, GenerationStatus
from gate.db.models import Rollout
from tests import factories
from tests.evaluators.factories import RIGHT, make_pair

OK = GenerationStatus.OK

BAD_POLICIES = {
    "no stages": {"stages": []},
    "falling stages": {"stages": [50, 10]},
    "repeated stage": {"stages": [10, 10, 100]},
    "stage above 100": {"stages": [50, 150]},
    "stage of zero": {"stages": [0, 100]},
    "no segments": {"segments": []},
    "bad segment name": {"segments": ["Chat Room!"]},
    "negative margin": {"guardrails": {"failures": {"margin": -0.1}}},
    "rate above one": {"guardrails": {"failures": {"kill_at": 1.5}}},
    "negative latency margin": {"guardrails": {"ttft_p50": {"margin": -0.2}}},
    "unknown metric": {"primary": {"metric": "ttfb"}},
    "unknown guardrail": {"guardrails": {"tpot_p50": {"margin": 0.1}}},
    "floor for an unknown segment": {"guardrails": {"acceptance": {"segment_floors": {"x": 0.3}}}},
    "floor above one": {"guardrails": {"acceptance": {"segment_floors": {"chat": 1.3}}}},
    "not a number": {"alpha_kill": "NaN"},
    "infinite duration": {"max_duration_s": "Infinity"},
    "zero pairs": {"min_pairs": 0},
    "wrong type": {"stages": "all of them"},
    "unknown evaluator": {"evaluators": ["toxicity"]},
    "bad evaluator options": {"evaluators": {"task": {"timeout_s": -1}}},
    "evaluator option it does not take": {"evaluators": [{"name": "schema", "options": {"x": 1}}]},
    "evaluators not a list": {"evaluators": "schema"},
    "evaluator entry without a name": {"evaluators": [{"options": {}}]},
    "evaluator named twice": {"evaluators": ["schema", "schema"]},
}


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.parametrize("policy", BAD_POLICIES.values(), ids=BAD_POLICIES.keys())
def test_a_bad_policy_is_a_clear_422_on_create_and_patch(live, pg_committing, policy):
    with pg_committing() as db, db.begin():
        existing = factories.rollout(db, name="routes")
    spec = {
        "name": "new",
        "alias": "new",
        "baseline_route": "routes-base",
        "candidate_route": "routes-spec",
        "policy": policy,
    }
    created = live.http.post("/v1/rollouts", json=spec)
    patched = live.http.patch(
        f"/v1/rollouts/{existing.id}", json={"version": existing.version, "policy": policy}
    )

    for answer in (created, patched):
        assert answer.status_code == 422, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["code"] == "invalid_policy"
        assert answer.json()["detail"].startswith("invalid gate policy: ")
        assert "\n" not in answer.json()["detail"]
    assert [r["name"] for r in live.http.get("/v1/rollouts").json()] == ["routes"]
    assert live.http.get(f"/v1/rollouts/{existing.id}").json()["policy"] == {}


@pytest.mark.postgres
@pytest.mark.redis
def test_the_evaluators_key_is_accepted_stored_and_decides_what_scores_a_pair(live, pg_committing):
    # The evaluator registry's `evaluators:` key: only the named evaluators score the
    # rollout's pairs, with the options given (here: no greedy parity, no schema).
    with pg_committing() as db, db.begin():
        factories.rollout(db, name="routes")
    chosen = ["groundedness", {"name": "task", "options": {"timeout_s": 5}}]
    spec = {
        "name": "chosen",
        "alias": "chosen",
        "baseline_route": "routes-base",
        "candidate_route": "routes-spec",
        "policy": {"evaluators": chosen},
    }
    created = live.http.post("/v1/rollouts", json=spec)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["policy"] == {"evaluators": chosen}
    assert scored_by(pg_committing, body["id"]) == {"groundedness", "task"}

    parity_only = {"evaluators": {"greedy_parity": None}}
    patched = live.http.patch(
        f"/v1/rollouts/{body['id']}", json={"version": body["version"], "policy": parity_only}
    )
    assert patched.status_code == 200, patched.text
    assert scored_by(pg_committing, body["id"]) == {"greedy_parity"}


def scored_by(pg_committing, rollout_id):
    """Return the evaluators that score a new pair of the rollout, as it is stored."""
    with pg_committing() as db, db.begin():
        rollout = db.get(Rollout, rollout_id)
        sides = [(Cohort.BASELINE, RIGHT, OK), (Cohort.CANDIDATE, RIGHT, OK)]
        pair = make_pair(db, rollout, sides)
        return {r.evaluator for r in evaluate_pair(db, pair_id=pair.id)}
