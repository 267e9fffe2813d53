"""Soak: two gateways under steady traffic, 50 randomly timed kill / hold / resume calls,
Redis cut and restored in the middle. Every acknowledged state is the database's state,
each gateway sees each kill within a deadline, and no call starts on a plan older than a
kill its gateway has seen. Real processes, Postgres, Redis and HTTP; engines are local."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from gate.db import migrate
from gate.db.engine import make_engine, session_factory
from gate.engines.sim import SimLog, SimProfile, create_sim_app
from tests import factories
from tests.conftest import create_database, drop_database
from tests.gate.api.test_processes import admin_token, specgate_serve
from tests.gate.routing.test_deployments import killed, wait_until
from tests.servers import TcpProxy, serving

ACTIONS = 50
NEXT = {"running": ("kill", "hold"), "held": ("resume", "kill"), "killed": ("resume",)}


def ask(base: str, text: str) -> int:
    body = {"model": "soak", "messages": [{"role": "user", "content": text}]}
    return httpx.post(base + "/v1/chat/completions", json=body, timeout=30).status_code


def contents(log: SimLog) -> set[str]:
    return {str(m.get("content")) for b in list(log.bodies) for m in b.get("messages", [])}


class Traffic:
    """Steady requests to both gateways in a background thread; counts non-200 answers."""

    def __init__(self, gateways: list[str]) -> None:
        self.failures: list[int] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(gateways,), daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self, gateways: list[str]) -> None:
        while not self._stop.is_set():
            status = ask(gateways[self.sent % 2], f"steady-{self.sent}")
            if status != 200:
                self.failures.append(status)
            self.sent += 1


@pytest.fixture
def soak_db(pg_server) -> Iterator[str]:
    url = create_database(pg_server, prefix="specgate_soak")
    migrate.upgrade(url)
    yield url
    drop_database(pg_server, url)


@pytest.mark.postgres
@pytest.mark.redis
def test_soak_kills_resumes_and_holds_through_a_redis_outage(soak_db, redis_url):
    rng = random.Random(18)
    candidate = SimLog()
    redis_proxy = TcpProxy("127.0.0.1", 6379)
    env = {
        "SPECGATE_REDIS_URL": f"redis://127.0.0.1:{redis_proxy.port}/{redis_url.rsplit('/')[-1]}",
        "SPECGATE_STATE_POLL_INTERVAL_S": "1.0",
        "SPECGATE_CONTROL_RATE": "0",
    }
    with ExitStack() as stack:
        stack.callback(redis_proxy.close)
        base_url = stack.enter_context(serving(create_sim_app(SimProfile())))
        cand_url = stack.enter_context(serving(create_sim_app(SimProfile(), candidate)))
        with session_factory(make_engine(soak_db))() as db, db.begin():
            rollout = factories.running_rollout(
                db,
                name="soak",
                base_url=base_url + "/v1",
                candidate_url=cand_url + "/v1",
                sample_rate=1.0,
                policy={"stages": [100]},
            )
        auth = {"Authorization": f"Bearer {admin_token(soak_db)}"}
        gateways = [stack.enter_context(specgate_serve(soak_db, **env)) for _ in range(2)]
        rid = str(rollout.id)
        wait_until(lambda: all(killed(g).get(rid) == 0.0 for g in gateways), "both loaded")
        state, probes = "running", []
        with Traffic(gateways) as traffic:
            for i in range(ACTIONS):
                if i == ACTIONS // 3:
                    redis_proxy.cut()
                if i == 2 * ACTIONS // 3:
                    redis_proxy.restore()
                time.sleep(rng.uniform(0, 0.3))  # randomly timed calls, not a sync point
                action = rng.choice(NEXT[state])
                via, other = rng.sample(gateways, 2)
                answer = httpx.post(
                    f"{via}/v1/rollouts/{rid}/{action}", json={"reason": f"soak {i}"}, headers=auth
                )
                assert answer.status_code == 200, (i, action, answer.text)
                acked = answer.json()
                stored = httpx.get(f"{other}/v1/rollouts/{rid}", headers=auth).json()
                assert (stored["state"], stored["version"]) == (acked["state"], acked["version"])
                state = acked["state"]
                if state == "killed":
                    wait_until(
                        lambda: all(killed(g).get(rid) == 1.0 for g in gateways),
                        f"kill {i} seen by both gateways",
                    )
                    for g, gateway in enumerate(gateways):
                        probes.append(f"probe-{i}-{g}")
                        assert ask(gateway, probes[-1]) == 200
        # A final request that must mirror: once it has reached the candidate, any probe
        # that had been mirrored would have too.
        if state != "running":
            httpx.post(
                f"{gateways[0]}/v1/rollouts/{rid}/resume", json={"reason": "end"}, headers=auth
            )
        wait_until(lambda: all(killed(g).get(rid) == 0.0 for g in gateways), "resumed")
        wait_until(
            lambda: ask(gateways[0], "final") == 200 and "final" in contents(candidate),
            "final mirrored",
        )

    assert probes, "the soak must kill at least once"
    assert not set(probes) & contents(candidate), "a call started on a plan older than a kill"
    assert traffic.failures == [], "the primary answer is never touched"
    assert traffic.sent > ACTIONS
