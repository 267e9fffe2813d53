"""The control API on real Postgres, with one key per scope."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from gate.api.app import create_api_app
from gate.api.deps import Services
from gate.keys.service import create_key, revoke_key
from gate.routing.pubsub import LocalBus
from gate.settings import Settings
from tests import factories

SECRET = "test-secret"


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
    app = create_api_app(Services(settings=settings, sessions=pg_committing, publisher=bus))
    with TestClient(app) as client:
        yield Api(client, tokens, rollout_id, bus)
