"""A mirror call waiting in the pool re-checks the routing plan when it starts: a kill the
gateway has seen since the request arrived means it never reaches the candidate."""

from __future__ import annotations

import httpx

from gate.engines.sim import SimProfile
from gate.rollouts.states import Action
from gate.routing import service as routing_service
from tests.gate.gateway.conftest import ALIAS, gateway_stack
from tests.waits import wait_until

MESSAGES = [{"role": "user", "content": "hi"}]


def inflight(url: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("specgate_gateway_mirror_inflight "):
            return float(line.split()[1])
    return -1.0


def test_queued_mirrors_do_not_start_after_a_kill(tmp_path):
    slow = SimProfile(ttft_s=1.0, spec_tokens=4, acceptance=0.7)
    with gateway_stack(
        tmp_path, candidate=slow, mirror_max_concurrency=1, mirror_deadline_s=30.0
    ) as stack:
        client = stack.client()
        for _ in range(4):
            client.chat.completions.create(model=ALIAS, messages=MESSAGES)
        assert wait_until(lambda: len(stack.candidate_log.bodies) == 1)
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
        assert wait_until(lambda: inflight(stack.url) == 0)
        assert len(stack.candidate_log.bodies) == 1, "a queued mirror started after the kill"
