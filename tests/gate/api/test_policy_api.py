"""A bad gate policy is a clear 422 on create and on PATCH, over real HTTP: nothing stored,
and the client's keep-alive connection keeps working."""

from __future__ import annotations

import pytest

from tests import factories

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
