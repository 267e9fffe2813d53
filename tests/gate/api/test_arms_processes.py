"""Several candidate routes (arms) through the real API and a real `specgate serve`
(embedded: its spans land in the store in process): each sampled episode is mirrored to
one arm, pairs name it, and one arm's kill stops mirroring to it alone (issue 40)."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import ExitStack

import httpx
from sqlalchemy import select

from gate.db import migrate
from gate.db.engine import make_engine, session_factory
from gate.db.enums import Cohort
from gate.db.models import Generation, Pair, Route
from gate.engines.sim import SimLog, SimProfile, create_sim_app
from gate.pairs.export import pair_records
from tests.gate.api.test_processes import admin_token, specgate_serve
from tests.servers import serving
from tests.waits import wait_until

ARMS = ("k2", "k4", "k8")
EPISODES = 30


def episodes(log: SimLog) -> Counter[str]:
    """Requests per episode an engine received (the episode is named in the prompt)."""
    return Counter(b["messages"][0]["content"].split()[0] for b in log.bodies)


def send(gateway: str, episode: str) -> None:
    body = {"model": "smol", "messages": [{"role": "user", "content": f"{episode} hi"}]}
    headers = {"X-Specgate-Episode": episode}
    answer = httpx.post(gateway + "/v1/chat/completions", json=body, headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text


def test_arms_get_sticky_shares_and_one_arm_is_killed_alone(tmp_path):
    url = f"sqlite:///{tmp_path}/store.db"
    migrate.upgrade(url)
    logs = {arm: SimLog() for arm in ARMS}
    with ExitStack() as stack:
        base_url = stack.enter_context(serving(create_sim_app(SimProfile())))
        arm_urls = {
            arm: stack.enter_context(serving(create_sim_app(SimProfile(), logs[arm])))
            for arm in ARMS
        }
        env = {"SPECGATE_STATE_POLL_INTERVAL_S": "0.3", "SPECGATE_CONTROL_RATE": "0"}
        gateway = stack.enter_context(specgate_serve(url, embedded=True, **env))
        api = httpx.Client(
            base_url=gateway, headers={"Authorization": f"Bearer {admin_token(url)}"}
        )
        routes = [("plain", base_url, "baseline")] + [
            (f"ngram-{arm}", arm_urls[arm], "candidate") for arm in ARMS
        ]
        for name, at, role in routes:
            spec = {"name": name, "base_url": at + "/v1", "model": "sim", "role": role}
            assert api.post("/v1/routes", json=spec).status_code == 201
        made = api.post(
            "/v1/rollouts",
            json={
                "name": "three-ngram",
                "alias": "smol",
                "baseline_route": "plain",
                "arms": [{"name": arm, "route": f"ngram-{arm}"} for arm in ARMS[:2]],
                "sample_rate": 1.0,
                "policy": {"stages": [100]},
            },
        )
        assert made.status_code == 201, made.text
        rid = made.json()["id"]
        assert api.post(f"/v1/rollouts/{rid}/start", json={"reason": "go"}).status_code == 200
        added = api.post(
            f"/v1/rollouts/{rid}/arms", json={"name": "k8", "route": "ngram-k8", "reason": "k=8"}
        )
        assert added.status_code == 201, added.text

        def mirrored() -> int:
            return sum(len(log.bodies) for log in logs.values())

        # The gateway has read the third arm once a probe episode lands on it.
        probes = iter(range(10_000))
        assert wait_until(lambda: send(gateway, f"probe-{next(probes)}") or logs["k8"].bodies)
        assert wait_until(lambda: _settled(gateway))  # the probes' mirrors have all landed
        before = mirrored()
        for number in range(EPISODES):
            for _ in range(2):  # two turns: one episode, one arm
                send(gateway, f"ep-{number}")
        assert wait_until(lambda: mirrored() == before + 2 * EPISODES)
        first = {arm: {e for e in episodes(logs[arm]) if e.startswith("ep-")} for arm in ARMS}
        assert all(first.values()), "every arm gets a share"
        assert sum(len(got) for got in first.values()) == EPISODES, "an episode went to one arm"
        assert all(episodes(logs[a])[e] == 2 for a in ARMS for e in first[a])

        killed = api.post(f"/v1/rollouts/{rid}/arms/k4/kill", json={"reason": "quality -5"})
        assert killed.status_code == 200, killed.text
        assert killed.json()["state"] == "running"
        # Once the gateway has reloaded, an episode that was k4's is mirrored elsewhere.
        moved = sorted(first["k4"])[0]
        assert wait_until(lambda: send(gateway, moved) or moved in _others(logs, "k4"))
        assert wait_until(lambda: _settled(gateway))
        k4_before = len(logs["k4"].bodies)
        before = mirrored()
        for number in range(EPISODES):
            send(gateway, f"ep-{number}")
        assert wait_until(lambda: mirrored() == before + EPISODES)
        assert len(logs["k4"].bodies) == k4_before, "a killed arm is not mirrored to"
        for arm in ("k2", "k8"):  # the others go on, and keep their episodes
            assert all(episodes(logs[arm])[e] == 3 for e in first[arm])

        trail = api.get(f"/v1/audit?rollout_id={rid}").json()
        assert ("arm.kill", "quality -5", "k4") in {
            (e["action"], e["reason"], e["details"].get("arm")) for e in trail
        }

        factory = session_factory(make_engine(url))

        def exported() -> list[dict]:
            with factory() as db:
                return list(pair_records(db, rollout_id=rid))

        def arms_agree() -> bool:  # every pair names the arm that answered it
            named = Counter(r["arm"] for r in exported())
            return named == {arm: len(log.bodies) for arm, log in logs.items()}

        assert wait_until(lambda: _settled(gateway) and arms_agree())
        records = exported()
        with factory() as db:
            answered = db.execute(
                select(Pair.arm, Route.name)
                .join(Generation, Generation.pair_id == Pair.id)
                .join(Route, Route.id == Generation.route_id)
                .where(Generation.cohort == Cohort.CANDIDATE)
            ).all()
        assert len(answered) == len(records)
        assert all(route == f"ngram-{arm}" for arm, route in answered)

        gone = api.post("/v1/kill", json={"reason": "incident"})
        assert gone.status_code == 200 and {r["id"] for r in gone.json()} == {rid}
        assert wait_until(lambda: _stopped(gateway, rid))
        before = mirrored()
        for number in range(6):
            send(gateway, f"ep-{number}")
        time.sleep(0.5)  # strays would arrive by now: none may
        assert mirrored() == before, "the global kill stops every arm"


def _others(logs: dict[str, SimLog], arm: str) -> set[str]:
    return {e for other, log in logs.items() if other != arm for e in episodes(log)}


def _settled(gateway: str) -> bool:
    """No mirror call is queued or running (a call is counted from before the primary runs)."""
    for line in httpx.get(gateway + "/metrics", timeout=2).text.splitlines():
        if line.startswith("specgate_gateway_mirror_inflight"):
            return float(line.rsplit(" ", 1)[1]) == 0
    return False


def _stopped(gateway: str, rollout_id: int) -> bool:
    for line in httpx.get(gateway + "/metrics", timeout=2).text.splitlines():
        if line.startswith("specgate_gateway_rollout_killed{") and f'"{rollout_id}"' in line:
            return line.rsplit(" ", 1)[1] == "1.0"
    return False
