"""Readiness means "can serve traffic": only the first routing load gates it. A Redis outage
or a stale state (already baseline only) is reported, never a reason to leave service."""

from __future__ import annotations

import time
from contextlib import ExitStack

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy.engine import make_url

from gate.gateway.factory import build_gateway_app
from gate.settings import Settings
from tests.servers import TcpProxy, serving


def wait_for(base: str, path: str, status: int, deadline_s: float = 15.0) -> httpx.Response:
    deadline = time.monotonic() + deadline_s
    while True:
        answer = httpx.get(base + path, timeout=5)
        if answer.status_code == status or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


@pytest.mark.postgres
@pytest.mark.redis
def test_ready_once_routing_loaded_even_with_redis_down(pg_url, redis_url):
    url = make_url(pg_url)
    database = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    broker = TcpProxy("127.0.0.1", 6379)
    database.cut()
    broker.cut()
    settings = Settings(
        database_url=url.set(port=database.port).render_as_string(hide_password=False),
        redis_url=f"redis://127.0.0.1:{broker.port}/{redis_url.rsplit('/', 1)[1]}",
        secret_key="s",
        state_poll_interval_s=0.2,
        state_stale_after_s=1.0,
    )
    with ExitStack() as stack:
        stack.callback(database.close)
        stack.callback(broker.close)
        base = stack.enter_context(
            serving(build_gateway_app(settings, exporter=InMemorySpanExporter()))
        )
        health = httpx.get(base + "/healthz")
        assert health.status_code == 200 and health.json()["routes_down"] == {}
        assert httpx.get(base + "/readyz").status_code == 503, "no routing state yet"

        database.restore()
        ready = wait_for(base, "/readyz", 200)
        assert ready.status_code == 200, f"Redis down must not block readiness: {ready.text}"
        assert ready.json()["checks"]["pubsub"] != "ok"

        database.cut()
        health = wait_for(base, "/healthz", 200)
        deadline = time.monotonic() + 15
        while not health.json().get("routing_stale") and time.monotonic() < deadline:
            health = httpx.get(base + "/healthz")
        assert health.json()["routing_stale"] is True, "a stale state is reported"
        assert httpx.get(base + "/readyz").status_code == 200, "stale means baseline only"
