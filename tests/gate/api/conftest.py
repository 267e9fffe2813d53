"""The control API on real Postgres, with one key per scope."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from gate.api.deps import Services
from gate.keys.service import create_key, revoke_key
from gate.routing.pubsub import LocalBus, RedisPublisher, RoutingChange, channel_for
from gate.settings import Settings
from tests import factories
from tests.servers import control_api, serving

SECRET = "test-secret"
DEPLOYMENT = "api-test"


@dataclass
class Api:
    client: TestClient
    tokens: dict[str, str]
    rollout_id: int
    bus: LocalBus

    def headers(self, who: str) -> dict[str, str]:
        if who == "none":
            return {}
        if who == "malformed":
            return {"Authorization": "Token abc"}
        return {"Authorization": f"Bearer {self.tokens[who]}"}


@pytest.fixture
def api(pg_committing, pg_url):
    settings = Settings(database_url=pg_url, secret_key=SECRET, redis_url=None)
    tokens = {}
    with pg_committing() as db, db.begin():
        for scope in ("read", "operate", "admin"):
            _, tokens[scope] = create_key(
                db, name=scope, scopes=[scope], secret_key=SECRET, actor="test"
            )
        _, tokens["revoked"] = create_key(
            db, name="old", scopes=["admin"], secret_key=SECRET, actor="test"
        )
        revoke_key(db, name="old", actor="test")
        rollout_id = factories.rollout(db, name="secret-rollout", policy={"stages": [100]}).id
    bus = LocalBus()
    app = control_api(Services(settings=settings, sessions=pg_committing, publisher=bus))
    with TestClient(app) as client:
        yield Api(client, tokens, rollout_id, bus)


@dataclass
class Live:
    http: httpx.Client
    messages: redis.client.PubSub

    def next_change(self, deadline_s: float = 10.0) -> RoutingChange:
        """Wait for the next routing message, up to a deadline."""
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            message = self.messages.get_message(ignore_subscribe_messages=True, timeout=0.2)
            if message is not None:
                return RoutingChange.decode(message["data"])
        raise AssertionError("no routing message arrived")


@pytest.fixture
def live(pg_committing, pg_url, redis_url) -> Iterator[Live]:
    """The control API served over HTTP on Postgres, publishing on real Redis."""
    settings = Settings(database_url=pg_url, secret_key=SECRET, redis_url=redis_url)
    with pg_committing() as db, db.begin():
        _, token = create_key(db, name="admin", scopes=["admin"], secret_key=SECRET, actor="t")
    publisher = RedisPublisher(redis_url, deployment=DEPLOYMENT)
    services = Services(settings=settings, sessions=pg_committing, publisher=publisher)
    listener = redis.Redis.from_url(redis_url)
    with ExitStack() as stack:
        base = stack.enter_context(serving(control_api(services)))
        pubsub = listener.pubsub()
        pubsub.subscribe(channel_for(DEPLOYMENT))
        auth = {"Authorization": f"Bearer {token}"}
        http = stack.enter_context(httpx.Client(base_url=base, headers=auth, timeout=10))
        yield Live(http, pubsub)
        pubsub.close()
    listener.close()
