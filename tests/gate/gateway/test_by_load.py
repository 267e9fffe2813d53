"""A promoted rollout routed by load (`promotion.route_by_load`): each request goes to the
candidate only while its running requests are below the segment's rehearsed crossover,
with hysteresis; a stale or missing crossover sends everything to the baseline; the kill
switch and per-request fallback behave as for a canary. Real routes on 127.0.0.1."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from gate.db.enums import Decision, RolloutMode, RolloutState
from gate.db.models import EngineSample, Rollout, Verdict
from gate.engines.sim import SimProfile, create_sim_app
from gate.gateway.by_load import LoadRouter
from gate.pairs.load import RUNNING
from gate.rehearse import service as rehearsals
from gate.rehearse.schemas import RehearsalIn
from gate.rollouts.states import Action, routing_plan
from gate.routing.crossover import ByLoad, Crossover, Running, SegmentCrossover
from gate.routing.service import change_state
from gate.routing.snapshot import RolloutRouting, RouteTarget
from gate.telemetry import attributes as A
from tests.factories import rehearsal_summary
from tests.gate.gateway.conftest import ALIAS, Stack, gateway_stack, held
from tests.waits import wait_until

MESSAGES = [{"role": "user", "content": "hello"}]
BY_LOAD = {"stages": [100], "promotion": {"route_by_load": True, "hysteresis": 1}}


def crossover_summary(low: int | None, *, run_at: datetime | None = None) -> RehearsalIn:
    """A rehearsal whose `all` and `copy` crossovers start at `low` (creative never wins)."""
    summary = rehearsal_summary()
    for segment in ("all", "copy"):
        summary["crossover"][segment] = {"low": low, "high": None, "text": f"above {low}"}
    summary["run_at"] = (run_at or datetime.now(UTC)).isoformat()
    return RehearsalIn.model_validate(summary)


def record(stack: Stack, rehearsal: RehearsalIn) -> None:
    with stack.factory() as session, session.begin():
        rehearsals.record(session, rollout_id=stack.rollout_id, rehearsal=rehearsal, actor="t")


def act(stack: Stack, action: Action, state: RolloutState) -> None:
    """Apply `action` as an operator does (published), and wait for the gateway to see it."""
    with stack.factory() as session, session.begin():
        change_state(
            session, rollout_id=stack.rollout_id, action=action, actor="t", reason="t",
            publisher=stack.bus,
        )  # fmt: skip
    assert wait_until(lambda: getattr(stack.routing.lookup(ALIAS), "state", None) is state)


def gauge(stack: Stack, value: float) -> None:
    """Record the candidate engine's running requests as the scraper would, now."""
    with stack.factory() as session, session.begin():
        rollout = session.get(Rollout, stack.rollout_id)
        assert rollout is not None
        session.add(
            EngineSample(
                route_id=rollout.candidate_route_id, metric=RUNNING, labels={}, value=value,
                scraped_at=datetime.now(UTC),
            )
        )  # fmt: skip


def routed_by(stack: Stack, level: int | None) -> bool:
    """Whether the gateway's snapshot routes by `level` (None: no crossover)."""
    routing = stack.routing.lookup(ALIAS)
    if routing is None or routing.by_load is None or routing.state is not RolloutState.PROMOTED:
        return False
    cross = routing.by_load.crossover
    return (cross.of("all").level if cross else None) == level


def ask(stack: Stack, segment: str = "chat", *, stream: bool = False) -> dict[str, Any]:
    """One request; return the attributes of the route call that answered it."""
    before = len(stack.spans())
    client = stack.client(default_headers={"x-specgate-segment": segment})
    answer = client.chat.completions.create(model=ALIAS, messages=MESSAGES, stream=stream)
    if stream:
        assert len(list(answer)) > 1  # type: ignore[arg-type]
    else:
        assert answer.choices[0].message.content  # type: ignore[union-attr]

    # The call that answered is the one that did not fall back. A streamed answer's span
    # ends just after its last chunk reached the client, so a candidate's fallback span
    # can be the only new one yet: wait for the answering call's own.
    def answering() -> list[Any]:
        return [s for s in stack.spans()[before:] if not s.attributes.get(A.FALLBACK)]

    assert wait_until(answering)
    return dict(answering()[-1].attributes)


def served(stack: Stack, segment: str = "chat") -> tuple[str, str | None]:
    attributes = ask(stack, segment)
    return attributes[A.COHORT], attributes.get(A.ROUTED_BY_LOAD)


def metrics(stack: Stack) -> str:
    return httpx.get(stack.url + "/metrics").text


@contextmanager
def promoted(tmp_path, **kw: Any) -> Iterator[Stack]:
    with gateway_stack(tmp_path, policy=BY_LOAD, sample_rate=0.0, **kw) as stack:
        act(stack, Action.PROMOTE, RolloutState.PROMOTED)
        yield stack


def test_without_a_rehearsal_the_baseline_serves_everything(tmp_path):
    with promoted(tmp_path) as stack:
        assert wait_until(lambda: routed_by(stack, None))
        assert served(stack) == ("baseline", "crossover_missing")
        assert 'source="missing"} 0.0' in metrics(stack)


def test_below_the_crossover_the_candidate_serves_and_a_new_rehearsal_moves_it(tmp_path):
    with promoted(tmp_path) as stack:
        record(stack, crossover_summary(2))
        assert wait_until(lambda: routed_by(stack, 2))
        assert served(stack) == ("candidate", "below_crossover")
        series = 'segment="all",source="rehearsal"} 2.0'
        assert series in metrics(stack)
        # Creative never proved a win: its crossover is 0, the baseline serves it.
        assert served(stack, "creative") == ("baseline", "above_crossover")
        gauge(stack, 5.0)  # the engine runs 5 requests: above the crossover
        assert wait_until(lambda: served(stack) == ("baseline", "above_crossover"), timeout=10)
        record(stack, crossover_summary(8))  # a new rehearsal: speculation pays up to 8
        assert wait_until(lambda: routed_by(stack, 8))
        assert served(stack) == ("candidate", "below_crossover")
        assert 'segment="all",source="rehearsal"} 8.0' in metrics(stack)


def test_a_stale_crossover_sends_everything_to_the_baseline(tmp_path):
    with promoted(tmp_path) as stack:
        record(stack, crossover_summary(8, run_at=datetime.now(UTC) - timedelta(days=30)))
        assert wait_until(lambda: routed_by(stack, 8))
        assert served(stack) == ("baseline", "crossover_stale")
        assert 'segment="all",source="stale"} 0.0' in metrics(stack)


def judge(stack: Stack, bands: list[dict[str, Any]]) -> None:
    """Store a verdict made now with these load bands, as the gate does."""
    with stack.factory() as session, session.begin():
        session.add(Verdict(rollout_id=stack.rollout_id, decision=Decision.CONTINUE,
                            bands=bands, created_at=datetime.now(UTC)))  # fmt: skip


def test_proven_live_load_bands_newer_than_the_rehearsal_route(tmp_path):
    with promoted(tmp_path) as stack:
        record(stack, crossover_summary(8, run_at=datetime.now(UTC) - timedelta(hours=1)))
        assert wait_until(lambda: routed_by(stack, 8))
        gauge(stack, 3.0)
        assert served(stack) == ("candidate", "below_crossover")
        # The mirrored pairs won at 1.4 running requests on average and lost at 4.5.
        won = {"band": "<2", "ratio": 0.8, "lower": 0.7, "upper": 0.9, "n": 90,
               "candidate_load": 1.4, "baseline_load": 2.0, "proven": True}  # fmt: skip
        lost = {**won, "band": "4-8", "lower": 1.1, "upper": 1.3, "candidate_load": 4.5}
        judge(stack, [won, lost])
        assert wait_until(lambda: routed_by(stack, 2))
        assert 'segment="all",source="load_bands"} 2.0' in metrics(stack)
        gauge(stack, 3.0)
        assert served(stack) == ("baseline", "above_crossover")


def test_the_kill_switch_ends_routing_by_load(tmp_path):
    with promoted(tmp_path) as stack:
        record(stack, crossover_summary(8))
        assert wait_until(lambda: routed_by(stack, 8))
        assert served(stack) == ("candidate", "below_crossover")
        act(stack, Action.KILL, RolloutState.KILLED)
        assert served(stack) == ("baseline", None)
        assert "specgate_gateway_crossover_running_requests{" not in metrics(stack)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_failing_candidate_falls_back_to_the_baseline(tmp_path, stream):
    with promoted(tmp_path, candidate=SimProfile(failure="status500")) as stack:
        record(stack, crossover_summary(8))
        assert wait_until(lambda: routed_by(stack, 8))
        attributes = ask(stack, stream=stream)  # the client got its answer: the baseline's
        assert attributes[A.COHORT] == "baseline"
        failed = stack.spans("candidate")
        assert [s.attributes[A.STATUS] for s in failed] == ["fallback"]
        assert failed[0].attributes[A.ROUTED_BY_LOAD] == "below_crossover"


def test_the_gateways_own_in_flight_calls_count_without_a_gauge(tmp_path):
    release, arrived = threading.Event(), []
    candidate = held(create_sim_app(SimProfile(spec_tokens=4, acceptance=0.7)), release, arrived)
    with promoted(tmp_path, candidate_app=candidate) as stack:
        record(stack, crossover_summary(2))
        assert wait_until(lambda: routed_by(stack, 2))
        waiting = [threading.Thread(target=ask, args=(stack,)) for _ in range(2)]
        for thread in waiting:
            thread.start()
        try:
            assert wait_until(lambda: len(arrived) == 2)
            # Two calls running on the candidate: the crossover is reached.
            assert served(stack) == ("baseline", "above_crossover")
        finally:
            release.set()
            for thread in waiting:
                thread.join(timeout=30)
        assert served(stack) == ("candidate", "below_crossover")


def routing_at(level: int, *, hysteresis: int, running: float) -> RolloutRouting:
    """A promoted rollout's routing with a fresh crossover at `level` and engine gauge."""
    route = RouteTarget(
        id=1, name="spec", base_url="http://127.0.0.1:9", model="m", fingerprint="f"
    )
    cross = Crossover({"all": SegmentCrossover(level, level, None, "")}, "rehearsal", 1e9)
    by_load = ByLoad(hysteresis, 1e9, cross, Running(running, 2e9))
    promoted = RolloutState.PROMOTED
    return RolloutRouting(
        rollout_id=1, alias=ALIAS, state=promoted, mode=RolloutMode.SHADOW, stage=0,
        fraction=0.0, version=1, baseline=route, candidate=route,
        plan=routing_plan(promoted, RolloutMode.SHADOW, by_load=True), by_load=by_load,
    )  # fmt: skip


@pytest.mark.parametrize(("hysteresis", "switches"), [(0, 8), (1, 1), (2, 1)])
def test_hysteresis_keeps_a_load_at_the_crossover_from_flapping(hysteresis, switches):
    router = LoadRouter(clock=lambda: 2e9)
    loads = [3, 4, 5, 4, 5, 4, 5, 4, 5, 4]  # hovers around the crossover, 5
    chosen = [
        router.choose(routing_at(5, hysteresis=hysteresis, running=load), "chat", 0).speculate
        for load in loads
    ]
    flips = sum(a != b for a, b in itertools.pairwise(chosen))
    assert flips == switches
    assert chosen[:3] == [True, True, False]
    # Back on once the load falls below the band (C - h), whatever the hysteresis.
    back = router.choose(routing_at(5, hysteresis=hysteresis, running=2), "chat", 0)
    assert back.speculate
