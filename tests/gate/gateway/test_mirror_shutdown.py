"""A gateway shutdown (rolling restart) is not the candidate's fault: mirrors it cancels,
running or still queued, are each recorded as `dropped` with a clear reason, never as a
route timeout and never lost."""

from __future__ import annotations

from gate.engines.sim import SimProfile
from gate.gateway.mirror_pool import SHUTDOWN_QUEUED, SHUTDOWN_RUNNING
from gate.telemetry import attributes as A
from tests.gate.gateway.conftest import ALIAS, gateway_stack
from tests.gate.gateway.test_mirror_recheck import MESSAGES, inflight, wait_until


def test_shutdown_drops_running_and_queued_mirrors(tmp_path):
    slow = SimProfile(ttft_s=30.0)
    with gateway_stack(
        tmp_path, candidate=slow, mirror_max_concurrency=1, mirror_deadline_s=60.0
    ) as stack:
        client = stack.client()
        for _ in range(3):
            client.chat.completions.create(model=ALIAS, messages=MESSAGES)
        assert wait_until(lambda: len(stack.candidate_log.bodies) == 1)
        assert inflight(stack.url) == 3, "one mirror running, two queued"
    candidates = stack.spans("candidate")
    assert len(candidates) == 3, "a mirror cancelled at shutdown left no span"
    outcomes = sorted((s.attributes[A.STATUS], s.attributes[A.ERROR]) for s in candidates)
    assert outcomes == sorted(
        [("dropped", SHUTDOWN_RUNNING), ("dropped", SHUTDOWN_QUEUED), ("dropped", SHUTDOWN_QUEUED)]
    )


def test_a_mirror_past_its_deadline_is_still_a_timeout(tmp_path):
    with gateway_stack(tmp_path, candidate=SimProfile(ttft_s=30.0), mirror_deadline_s=0.5) as stack:
        stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES)
        assert wait_until(lambda: len(stack.spans("candidate")) == 1)
        (span,) = stack.spans("candidate")
        assert span.attributes[A.STATUS] == "timeout"
