"""Two deployments on one Redis server (different DB numbers, their own Postgres databases,
the same rollout ids) never move each other's rollouts, over real HTTP and processes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from gate.db import migrate
from gate.db.engine import make_engine, session_factory
from tests import factories
from tests.conftest import create_database, drop_database
from tests.gate.api.test_processes import admin_token, specgate_serve

SLOW_POLL = {"SPECGATE_STATE_POLL_INTERVAL_S": "600", "SPECGATE_CONTROL_RATE": "0"}


def killed(base: str) -> dict[str, float]:
    """Return the gateway's killed gauge by rollout id."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(base + "/metrics", timeout=2).text):
        for sample in family.samples:
            if sample.name == "specgate_gateway_rollout_killed":
                found[sample.labels["rollout"]] = sample.value
    return found


def wait_until(check, what: str, deadline_s: float = 15.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"not within {deadline_s}s: {what}")


def subscriptions(client: redis.Redis) -> int:
    channels = client.pubsub_channels("specgate:routing*")
    return sum(count for _, count in client.pubsub_numsub(*channels)) if channels else 0


@pytest.fixture
def two_databases(pg_server) -> Iterator[list[str]]:
    urls = [create_database(pg_server, prefix="specgate_dep") for _ in range(2)]
    for url in urls:
        migrate.upgrade(url)
        with session_factory(make_engine(url))() as db, db.begin():
            for name in ("shared", "marker"):
                factories.running_rollout(db, name=name, policy={"stages": [100]})
    yield urls
    for url in urls:
        drop_database(pg_server, url)


@pytest.mark.postgres
@pytest.mark.redis
def test_a_deployment_never_applies_another_deployments_routing_changes(two_databases, redis_url):
    number = int(redis_url.rsplit("/", 1)[1])
    # Pub/sub ignores the DB number: only publishing and subscribing use the second one.
    redis_urls = [redis_url, f"{redis_url.rsplit('/', 1)[0]}/{(number + 1) % 16}"]
    client = redis.Redis.from_url(redis_url)
    with ExitStack() as stack:
        a, b = (
            stack.enter_context(specgate_serve(db, SPECGATE_REDIS_URL=r, **SLOW_POLL))
            for db, r in zip(two_databases, redis_urls, strict=True)
        )
        auth_a, auth_b = ({"Authorization": f"Bearer {admin_token(url)}"} for url in two_databases)
        wait_until(lambda: subscriptions(client) >= 2, "both gateways subscribed")
        wait_until(lambda: killed(a) == killed(b) == {"1": 0.0, "2": 0.0}, "both running")

        def act(base: str, auth: dict[str, str], rollout_id: int, action: str) -> None:
            answer = httpx.post(
                f"{base}/v1/rollouts/{rollout_id}/{action}", json={"reason": "t"}, headers=auth
            )
            assert answer.status_code == 200, answer.text

        act(b, auth_b, 1, "kill")
        wait_until(lambda: killed(b)["1"] == 1.0, "B's kill reached B")
        act(a, auth_a, 1, "kill")
        wait_until(lambda: killed(a)["1"] == 1.0, "A's kill reached A")
        act(a, auth_a, 1, "resume")
        wait_until(lambda: killed(a)["1"] == 0.0, "A's resume reached A")
        # Pub/sub delivers in publish order: once B's own later kill has arrived, A's
        # messages would have too.
        act(b, auth_b, 2, "kill")
        wait_until(lambda: killed(b)["2"] == 1.0, "B's second kill reached B")

        assert killed(b)["1"] == 1.0, "A's resume moved B's killed rollout back into routing"
    client.close()
