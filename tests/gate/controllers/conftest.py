"""A running specgate (uvicorn on 127.0.0.1, real Postgres) and a local engine as both routes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from gate.api.deps import Services
from gate.db.enums import RolloutState
from gate.engines.sim import SimProfile, create_sim_app
from gate.keys.service import create_key
from gate.periodic import judge_running
from gate.rollouts import service
from gate.rollouts.states import Action
from gate.routing.pubsub import LocalBus
from gate.routing.sync import db_loader
from gate.settings import Settings
from tests import factories
from tests.gate.controllers.traffic_world import cluster as cluster
from tests.servers import control_api, serving

SECRET = "controllers-secret"
NAME = "llama-8b-eagle3"  # the specgate rollout the example manifests name
ANALYSIS_KEY = "argo-analysis"  # the read key Argo Rollouts polls with (the example's)
# Small but honest: one segment, short warm-up, no minimum duration.
POLICY = {
    "segments": ["chat"],
    "warmup_pairs": 50,
    "min_pairs": 300,
    "min_duration_s": 0,
    "stages": [100],
}


@dataclass
class Specgate:
    base: str
    client: httpx.Client
    sessions: sessionmaker[Session]
    bus: LocalBus
    keys: dict[str, str]
    rollout_id: int

    def auth(self, scope: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[scope]}"}

    def link(
        self, controller: str, rollout_id: int | None = None, **extra: object
    ) -> dict[str, object]:
        body = {"controller": controller, "poll_interval_s": 60, **extra}
        if controller == "argo-rollouts":
            body.setdefault("analysis_key", ANALYSIS_KEY)
        response = self.client.post(
            f"/v1/rollouts/{rollout_id or self.rollout_id}/controller",
            json=body,
            headers=self.auth("admin"),
        )
        assert response.status_code == 200, response.text
        answer: dict[str, object] = response.json()
        return answer

    def next_revision(self, name: str) -> int:
        """Create the rollout of the controller's next revision (same routes' engine)."""
        with self.sessions() as db, db.begin():
            first = service.get_rollout(db, rollout_id=self.rollout_id)
            url = first.candidate_route.base_url
            return factories.rollout(
                db, name=name, policy=POLICY, base_url=url, candidate_url=url
            ).id

    def start(self) -> None:
        with self.sessions() as db, db.begin():
            service.transition(
                db, rollout_id=self.rollout_id, action=Action.START, actor="t", reason="t"
            )

    def seed(self, count: int, **kw: float) -> None:
        with self.sessions() as db, db.begin():
            factories.seed_pairs(db, self.rollout_id, count, **kw)

    def judge(self) -> None:
        """One run of the periodic gate job, as beat or the embedded loop would run it."""
        assert judge_running(self.sessions, self.bus) >= 1

    def kill(self, reason: str) -> None:
        response = self.client.post(
            f"/v1/rollouts/{self.rollout_id}/kill",
            json={"reason": reason},
            headers=self.auth("operate"),
        )
        assert response.status_code == 200, response.text
        # The rollouts router still commits after answering (its session is request-scoped),
        # so wait for the kill to be visible before playing the controller's next check.
        deadline = time.monotonic() + 10
        while self.state() is not RolloutState.KILLED:
            assert time.monotonic() < deadline, "the kill never became visible"
            time.sleep(0.01)

    def candidate_traffic(self) -> bool:
        """Whether the gateways' routing (as they load it) sends anything to the candidate."""
        return db_loader(self.sessions)().by_alias[NAME].plan.candidate_traffic

    def state(self, rollout_id: int | None = None) -> RolloutState:
        with self.sessions() as db:
            return service.get_rollout(db, rollout_id=rollout_id or self.rollout_id).state


@pytest.fixture
def engine_url() -> Iterator[str]:
    with serving(create_sim_app(SimProfile())) as base:
        yield base + "/v1"


@pytest.fixture
def specgate(pg_committing, pg_url, engine_url) -> Iterator[Specgate]:
    settings = Settings(database_url=pg_url, secret_key=SECRET, redis_url=None)
    keys = {}
    with pg_committing() as db, db.begin():
        for name, scope in (
            ("read", "read"), ("operate", "operate"), ("admin", "admin"), (ANALYSIS_KEY, "read")
        ):  # fmt: skip
            keys[name] = create_key(db, name=name, scopes=[scope], secret_key=SECRET, actor="t")[1]
        rollout_id = factories.rollout(
            db, name=NAME, policy=POLICY, base_url=engine_url, candidate_url=engine_url
        ).id
    bus = LocalBus()
    app = control_api(Services(settings=settings, sessions=pg_committing, publisher=bus))
    with serving(app) as base, httpx.Client(base_url=base, timeout=10) as client:
        yield Specgate(base, client, pg_committing, bus, keys, rollout_id)
