"""HTTP protocol details a client relies on, over real HTTP: WWW-Authenticate on 401, Allow
on 405, and an OpenAPI that declares the bearer scheme and every problem response."""

from __future__ import annotations

import httpx
import pytest

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def test_401_says_bearer_and_405_says_what_is_allowed(live):
    base = str(live.http.base_url)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
        refused = httpx.get(base + "/v1/rollouts", headers=headers)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert refused.headers["content-type"] == "application/problem+json"
    wrong = live.http.delete("/v1/rollouts")
    assert wrong.status_code == 405
    assert set(wrong.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}
    assert wrong.headers["content-type"] == "application/problem+json"


def test_openapi_declares_the_bearer_scheme_and_problem_responses(live):
    spec = live.http.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert [s["scheme"].lower() for s in schemes.values()] == ["bearer"]
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            where = f"{method.upper()} {path}"
            if path in ("/healthz", "/readyz"):
                continue
            # Flagger's webhook spec has no headers: those hooks carry a per-rollout token in
            # the path, which OpenAPI's security schemes cannot describe.
            path_token = path.startswith("/v1/hooks/flagger/") and "{token}" in path
            assert bool(operation.get("security")) is not path_token, where
            for status in ("401", "403", "422"):
                content = operation["responses"][status]["content"]
                assert list(content) == ["application/problem+json"], (where, status)
            if method == "post":
                assert "413" in operation["responses"], where
