"""Every endpoint x every kind of caller gets the right status, and nothing leaks."""

from __future__ import annotations

import pytest

from tests import factories

pytestmark = pytest.mark.postgres

CALLERS = ("none", "malformed", "revoked", "read", "operate", "admin")
RANK = {"read": 0, "operate": 1, "admin": 2}
REASON = {"reason": "matrix"}
# method, path, body, scope needed
ENDPOINTS = [
    ("GET", "/v1/routes", None, "read"),
    ("GET", "/v1/rollouts", None, "read"),
    ("GET", "/v1/rollouts/{id}", None, "read"),
    ("GET", "/v1/rollouts/{id}/verdicts", None, "read"),
    ("GET", "/v1/audit", None, "read"),
    ("GET", "/v1/rollouts/{id}/rehearsal", None, "read"),
    ("GET", "/v1/pairs", None, "read"),
    ("GET", "/v1/generations", None, "read"),
    (
        "POST",
        "/v1/routes",
        {"name": "new", "base_url": "http://127.0.0.1:9/v1", "model": "m", "role": "baseline"},
        "admin",
    ),
    (
        "POST",
        "/v1/rollouts",
        {
            "name": "x",
            "alias": "x",
            "baseline_route": "secret-rollout-base",
            "candidate_route": "secret-rollout-spec",
        },
        "admin",
    ),
    ("DELETE", "/v1/routes/no-such-route", None, "admin"),
    ("PATCH", "/v1/rollouts/{id}", {"version": 1, "sample_rate": 0.5}, "admin"),
    ("POST", "/v1/rollouts/{id}/start", REASON, "admin"),
    ("POST", "/v1/rollouts/{id}/promote", REASON, "admin"),
    ("POST", "/v1/rollouts/{id}/kill", REASON, "operate"),
    ("POST", "/v1/rollouts/{id}/hold", REASON, "operate"),
    ("POST", "/v1/rollouts/{id}/resume", REASON, "operate"),
    ("POST", "/v1/kill", REASON, "operate"),
    ("POST", "/v1/rollouts/{id}/rehearsals", factories.rehearsal_summary(), "admin"),
    ("POST", "/v1/feedback", {"response_id": "nope", "thumbs": 1}, "operate"),
]


def allowed(caller: str, needed: str) -> bool:
    return caller in RANK and RANK[caller] >= RANK[needed]


@pytest.mark.parametrize("caller", CALLERS)
def test_every_endpoint_for_every_caller(api, caller):
    for method, path, body, needed in ENDPOINTS:
        url = path.format(id=api.rollout_id)
        response = api.client.request(method, url, json=body, headers=api.headers(caller))
        label = f"{method} {path} as {caller}: {response.status_code} {response.text[:200]}"
        assert response.status_code < 500, label
        if caller in ("none", "malformed", "revoked"):
            assert response.status_code == 401, label
        elif not allowed(caller, needed):
            assert response.status_code == 403, label
        else:
            assert response.status_code not in (401, 403), label
        if response.status_code in (401, 403):
            assert "secret-rollout" not in response.text, label
            assert response.headers["content-type"] == "application/problem+json", label


def test_health_needs_no_key(api):
    assert api.client.get("/healthz").json() == {"status": "ok"}
    ready = api.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"]["database"] == "ok"
