"""Registering a route whose credential would go under a header the gateway writes itself
(framing, body type, trace context) is refused with a 4xx, over real HTTP, and stores nothing."""

from __future__ import annotations

import pytest


@pytest.mark.postgres
@pytest.mark.redis
def test_registering_a_route_with_a_framing_auth_header_is_a_4xx(live):
    route = {"name": "r", "base_url": "http://127.0.0.1:9/v1", "model": "m", "role": "baseline"}
    refused = live.http.post(
        "/v1/routes",
        json={**route, "auth": {"header": "Content-Length", "source": "env:SPECGATE_ROUTE_K"}},
    )
    assert refused.status_code == 422, refused.text[:300]
    assert "the gateway sets itself" in refused.text
    assert live.http.get("/v1/routes").json() == []
    assert live.http.post("/v1/routes", json=route).status_code == 201
