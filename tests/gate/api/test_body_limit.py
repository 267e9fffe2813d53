"""The control API refuses oversized bodies with a 413 problem document, over real HTTP,
whether the size is declared or the body is chunked, and stores nothing."""

from __future__ import annotations

import json

import pytest

BIG = 2 * 1024 * 1024


def route(name: str, padding: int = 0) -> dict[str, object]:
    return {
        "name": name,
        "base_url": "http://127.0.0.1:9/v1",
        "model": "m",
        "role": "baseline",
        "spec_config": {"padding": "x" * padding},
    }


@pytest.mark.postgres
@pytest.mark.redis
def test_a_body_over_the_limit_is_a_413_problem_and_nothing_is_stored(live):
    declared = live.http.post("/v1/routes", json=route("declared", BIG))
    raw = json.dumps(route("chunked", BIG)).encode()
    chunked = live.http.post(
        "/v1/routes",
        content=(raw[i : i + 65536] for i in range(0, len(raw), 65536)),
        headers={"content-type": "application/json"},
    )

    for answer in (declared, chunked):
        assert answer.status_code == 413, answer.text[:200]
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["code"] == "payload_too_large"
    assert live.http.get("/v1/routes").json() == []
    assert live.http.post("/v1/routes", json=route("small")).status_code == 201
