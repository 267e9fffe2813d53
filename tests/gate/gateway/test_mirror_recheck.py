"""A mirror call waiting in the pool re-checks the routing plan when it starts: a kill the
gateway has seen since the request arrived means it never reaches the candidate."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from gate.db.models import Rollout, RolloutArm
from gate.engines.sim import SimProfile, create_sim_app
from gate.gateway.sampling import choose_arm
from gate.rollouts import service
from gate.rollouts.schemas import RouteIn
from gate.rollouts.states import Action
from gate.routing import service as routing_service
from gate.telemetry import attributes as A
from tests.gate.gateway.conftest import ALIAS, Stack, gateway_stack, held
from tests.waits import wait_until

MESSAGES = [{"role": "user", "content": "hi"}]


def inflight(url: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("specgate_gateway_mirror_inflight "):
            return float(line.split()[1])
    return -1.0


@contextmanager
def one_mirror_held(tmp_path) -> Iterator[tuple[Stack, list[int]]]:
    """A gateway mirroring one call at a time to a candidate that holds each call until
    the block ends (however long the host takes to get there); yield it and the count of
    calls the candidate received."""
    release, arrived = threading.Event(), []
    candidate = held(create_sim_app(SimProfile(spec_tokens=4, acceptance=0.7)), release, arrived)
    with gateway_stack(
        tmp_path, candidate_app=candidate, mirror_max_concurrency=1, mirror_deadline_s=30.0
    ) as stack:
        try:
            yield stack, arrived
        finally:
            release.set()
        # The running call ends now; the queued ones start and re-check the plan.
        assert wait_until(lambda: inflight(stack.url) == 0)


def test_queued_mirrors_do_not_start_after_a_kill(tmp_path):
    with one_mirror_held(tmp_path) as (stack, arrived):
        client = stack.client()
        for _ in range(4):
            client.chat.completions.create(model=ALIAS, messages=MESSAGES)
        assert wait_until(lambda: len(arrived) == 1)
        assert inflight(stack.url) == 4, "one mirror running, three queued"
        with stack.factory() as session, session.begin():
            routing_service.change_state(
                session,
                rollout_id=stack.rollout_id,
                action=Action.KILL,
                actor="t",
                reason="t",
                publisher=stack.bus,
            )
        assert wait_until(lambda: stack.routing.lookup(ALIAS).state.value == "killed")
    assert len(arrived) == 1, "a queued mirror started after the kill"


def test_queued_mirrors_to_a_killed_arm_do_not_start(tmp_path):
    with one_mirror_held(tmp_path) as (stack, arrived):
        with stack.factory() as session, session.begin():
            # Two arms: "a" on the slow candidate, "b" on a second route.
            other = RouteIn(
                name="spec-b", base_url=stack.baseline_url + "/v1", model="sim", role="candidate"
            )
            second = service.create_route(session, spec=other, actor="t")
            rollout = session.get(Rollout, stack.rollout_id)
            rollout.arms = [
                RolloutArm(name="a", route_id=rollout.candidate_route_id),
                RolloutArm(name="b", route_id=second.id),
            ]
        assert wait_until(lambda: len(stack.routing.lookup(ALIAS).arms) == 2)
        arms = stack.routing.lookup(ALIAS).arms
        to_a = [
            e
            for e in (f"ep-{n}" for n in range(100))
            if choose_arm(stack.rollout_id, e.encode(), arms).name == "a"
        ]
        client = stack.client()
        for episode in to_a[:4]:
            client.chat.completions.create(
                model=ALIAS, messages=MESSAGES, extra_headers={"X-Specgate-Episode": episode}
            )
        assert wait_until(lambda: len(arrived) == 1)
        assert inflight(stack.url) == 4, "one mirror running, three queued"
        with stack.factory() as session, session.begin():
            routing_service.kill_arm(
                session,
                rollout_id=stack.rollout_id,
                name="a",
                actor="t",
                reason="t",
                publisher=stack.bus,
            )
        assert wait_until(lambda: [a.name for a in stack.routing.lookup(ALIAS).arms] == ["b"])
    assert len(arrived) == 1, "a queued mirror started after the arm's kill"
    dropped = [s for s in stack.spans("candidate") if s.attributes.get(A.STATUS) == "dropped"]
    assert len(dropped) == 3 and {s.attributes[A.ARM] for s in dropped} == {"a"}
    assert stack.routing.lookup(ALIAS).state.value == "running"
