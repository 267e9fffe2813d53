"""A candidate route that refuses connections (a canary scaled to zero) is down: skipped,
each skipped call recorded as the candidate's route failure (it cannot answer), probed once
per back-off, and used again once it answers."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from gate.db.enums import RolloutMode
from gate.db.models import Route
from gate.engines.sim import SimLog, SimProfile, create_sim_app
from gate.routing.health import ROUTE_DOWN, ROUTE_UNPROVEN, RouteHealth
from gate.telemetry import attributes as A
from tests.gate.gateway.conftest import ALIAS, Stack, gateway_stack
from tests.servers import TcpProxy, closed_port, serving
from tests.waits import wait_until

# Every route client passes these (gate/gateway/transport.py).
pytestmark = pytest.mark.usefixtures("each_transport")

MESSAGES = [{"role": "user", "content": "hello"}]


class Clock:
    """A clock the test moves: back-offs pass when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def statuses_of(stack: Stack, cohort: str) -> list[str]:
    spans = sorted(stack.spans(cohort), key=lambda s: s.start_time)
    return [s.attributes[A.STATUS] for s in spans]


def statuses(stack: Stack) -> list[str]:
    return statuses_of(stack, "candidate")


def ask(stack: Stack, *, stream: bool) -> None:
    """One request; the client must get the whole answer (from whichever route)."""
    answer = stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES, stream=stream)
    if stream:
        assert len(list(answer)) > 1
    else:
        assert answer.choices[0].message.content


def candidate_port(stack: Stack) -> int:
    port = urlsplit(stack.routing.lookup(ALIAS).candidate.base_url).port
    assert port is not None
    return port


@contextmanager
def candidate_appears(port: int) -> Iterator[tuple[TcpProxy, SimLog]]:
    """Start a candidate engine behind a listener on `port`, which counts connections."""
    log = SimLog()
    with serving(create_sim_app(SimProfile(spec_tokens=4, acceptance=0.7), log)) as url:
        target = urlsplit(url)
        proxy = TcpProxy("127.0.0.1", target.port or 0, listen_port=port)
        try:
            yield proxy, log
        finally:
            proxy.close()


def metric(stack: Stack, series: str) -> str:
    lines = httpx.get(stack.url + "/metrics").text.splitlines()
    return next(line for line in lines if line.startswith(series))


def route_down_gauge(stack: Stack) -> str:
    return metric(stack, 'specgate_gateway_route_down{route="spec"}')


def skipped_errors(stack: Stack) -> set[str]:
    """The errors of the candidate's calls the gateway skipped (every one but the probes)."""
    return skipped_after(stack, 1)


def skipped_after(stack: Stack, first: int) -> set[str]:
    """The errors of the candidate's calls from the `first`-th on (0-based), by start time."""
    spans = sorted(stack.spans("candidate"), key=lambda s: s.start_time)
    return {s.attributes[A.ERROR] for s in spans[first:]}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_down_shadow_candidate_is_skipped_then_probed_back(tmp_path, stream):
    clock = Clock()
    health = RouteHealth(backoff_s=5.0, max_backoff_s=60.0, clock=clock)
    with gateway_stack(tmp_path, candidate_down=True, health=health) as stack:
        for n in range(1, 11):
            ask(stack, stream=stream)
            assert wait_until(lambda n=n: len(stack.spans("candidate")) == n)
        # One connection refused, then nothing is sent until the probe: maybe a blip, so
        # the calls skipped meanwhile are dropped (not attributable), not failures.
        assert statuses(stack) == ["error"] + ["dropped"] * 9
        assert skipped_errors(stack) == {ROUTE_UNPROVEN}
        clock.now += 5.0  # the probe is refused too: the route is proven down
        for n in range(11, 21):
            ask(stack, stream=stream)
            assert wait_until(lambda n=n: len(stack.spans("candidate")) == n)
        # The candidate cannot answer: each call skipped now is its route failure (never
        # `dropped`, never the mirror pool's).
        assert statuses(stack)[10:] == ["error"] * 10 and skipped_after(stack, 11) == {ROUTE_DOWN}
        assert {s.attributes[A.STATUS] for s in stack.spans("baseline")} == {"ok"}
        assert route_down_gauge(stack).endswith(" 1.0")
        calls = 'specgate_gateway_route_calls_total{cohort="candidate",route="spec",status="error"}'
        assert metric(stack, calls).endswith(" 11.0")
        skipped = calls.replace('"error"', '"dropped"')
        assert metric(stack, skipped).endswith(" 9.0")  # the route's doing, not the pool's
        assert (
            "specgate_gateway_mirror_dropped_total{" not in httpx.get(stack.url + "/metrics").text
        )
        detail = httpx.get(stack.url + "/healthz").json()["routes_down"]
        assert detail["spec"]["failures"] == 2 and detail["spec"]["probe_in_s"] == 10.0

        with candidate_appears(candidate_port(stack)) as (listener, log):
            for n in range(21, 31):  # still within the back-off: not one connection
                ask(stack, stream=stream)
                assert wait_until(lambda n=n: len(stack.spans("candidate")) == n)
            assert listener.accepted == 0 and log.bodies == []
            assert statuses(stack)[20:] == ["error"] * 10

            clock.now += 10.0  # the back-off ends: the next mirror is the probe
            for n in range(31, 36):
                ask(stack, stream=stream)
                assert wait_until(lambda n=n: len(stack.spans("candidate")) == n)
            assert statuses(stack)[30:] == ["ok"] * 5 and len(log.bodies) == 5
            assert 1 <= listener.accepted <= 5
        assert route_down_gauge(stack).endswith(" 0.0")
        assert httpx.get(stack.url + "/healthz").json()["routes_down"] == {}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_down_canary_candidate_is_served_by_the_baseline(tmp_path, stream):
    clock = Clock()
    health = RouteHealth(backoff_s=5.0, max_backoff_s=60.0, clock=clock)
    with gateway_stack(
        tmp_path, candidate_down=True, mode=RolloutMode.CANARY, health=health
    ) as stack:
        for n in range(1, 11):
            ask(stack, stream=stream)
            assert wait_until(lambda n=n: len(stack.spans("candidate")) == n)
        # The first call found the route refusing (it fell back); until the probe is refused
        # too the rest are dropped (maybe a blip); then each skipped call falls back as the
        # candidate's failure. The baseline served each, as the candidate could not.
        assert statuses(stack) == ["fallback"] + ["dropped"] * 9
        clock.now += 5.0
        for n in range(11, 21):
            ask(stack, stream=stream)
            assert wait_until(lambda n=n: len(stack.spans("candidate")) == n)
        assert statuses(stack)[10:] == ["fallback"] * 10
        assert skipped_after(stack, 11) == {ROUTE_DOWN}
        assert len(stack.baseline_log.bodies) == 20
        assert wait_until(lambda: len(stack.spans("baseline")) == 20)
        assert {s.attributes[A.STATUS] for s in stack.spans("baseline")} == {"ok"}

        with candidate_appears(candidate_port(stack)) as (listener, log):
            ask(stack, stream=stream)
            assert listener.accepted == 0 and log.bodies == []
            clock.now += 10.0
            for _ in range(3):
                ask(stack, stream=stream)
            assert len(log.bodies) == 3 and len(stack.baseline_log.bodies) == 21
            assert wait_until(lambda: statuses(stack)[21:] == ["ok"] * 3)


def test_a_failed_probe_doubles_the_back_off(tmp_path):
    clock = Clock()
    health = RouteHealth(backoff_s=5.0, max_backoff_s=8.0, clock=clock)
    with gateway_stack(tmp_path, candidate_down=True, health=health) as stack:

        def probe_in() -> float:
            return httpx.get(stack.url + "/healthz").json()["routes_down"]["spec"]["probe_in_s"]

        for n, advance, expected in ((1, 0.0, 5.0), (2, 5.0, 8.0), (3, 8.0, 8.0)):
            clock.now += advance
            ask(stack, stream=False)
            assert wait_until(lambda n=n: len(stack.spans("candidate")) == n)
            assert probe_in() == expected
        assert statuses(stack) == ["error"] * 3


def test_a_candidate_answering_500_is_a_route_failure_not_down(tmp_path):
    with gateway_stack(tmp_path, candidate=SimProfile(failure="status500")) as stack:
        for n in range(1, 6):
            ask(stack, stream=False)
            assert wait_until(lambda n=n: len(stack.spans("candidate")) == n)
        assert statuses(stack) == ["error"] * 5
        assert len(stack.candidate_log.bodies) == 5
        assert httpx.get(stack.url + "/healthz").json()["routes_down"] == {}


def test_the_back_off_setting_lets_a_recovered_candidate_back(tmp_path):
    with gateway_stack(tmp_path, candidate_down=True, route_down_backoff_s=0.2) as stack:
        ask(stack, stream=False)
        assert wait_until(lambda: statuses(stack) == ["error"])
        with candidate_appears(candidate_port(stack)) as (_listener, log):
            # Mirrors resume after the real back-off, with no help from the test.
            assert wait_until(lambda: ask(stack, stream=False) or "ok" in statuses(stack))
            assert log.bodies


@contextmanager
def never_accepting() -> Iterator[int]:
    """A port whose accept queue is full: connections to it hang (connect timeout)."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    port = listener.getsockname()[1]
    held = []
    for _ in range(4):  # fill the queue; the kernel then drops new SYNs
        sock = socket.socket()
        sock.setblocking(False)
        with suppress(BlockingIOError):
            sock.connect(("127.0.0.1", port))
        held.append(sock)
    try:
        yield port
    finally:
        for sock in [*held, listener]:
            sock.close()


def use_candidate(stack: Stack, base_url: str) -> None:
    with stack.factory() as session, session.begin():
        session.query(Route).filter_by(name="spec").update({"base_url": base_url})
    assert wait_until(lambda: stack.routing.lookup(ALIAS).candidate.base_url == base_url)


def test_a_candidate_that_times_out_connecting_is_down_too(tmp_path):
    clock = Clock()
    health = RouteHealth(backoff_s=5.0, max_backoff_s=60.0, clock=clock)
    with (
        never_accepting() as port,
        gateway_stack(tmp_path, health=health, upstream_connect_timeout_s=0.3) as stack,
    ):
        use_candidate(stack, f"http://127.0.0.1:{port}/v1")
        for n in range(1, 6):
            ask(stack, stream=False)
            assert wait_until(lambda n=n: len(stack.spans("candidate")) == n)
        assert statuses(stack) == ["timeout"] + ["dropped"] * 4  # not yet proven down
        clock.now += 5.0  # the probe times out too: proven down, skipped calls fail
        for n in range(6, 9):
            ask(stack, stream=False)
            assert wait_until(lambda n=n: len(stack.spans("candidate")) == n)
        assert statuses(stack)[5:] == ["timeout", "error", "error"]


def test_the_baseline_is_never_skipped(tmp_path):
    with gateway_stack(tmp_path, sample_rate=0.0) as stack:
        refusing = f"http://127.0.0.1:{closed_port()}/v1"
        with stack.factory() as session, session.begin():
            session.query(Route).filter_by(name="base").update({"base_url": refusing})
        assert wait_until(lambda: stack.routing.lookup(ALIAS).baseline.base_url == refusing)
        for _ in range(3):
            with pytest.raises(openai.APIStatusError) as refused:
                ask(stack, stream=False)
            assert refused.value.body["code"] == "upstream_unreachable"
        assert wait_until(lambda: len(stack.spans("baseline")) == 3)
        assert statuses_of(stack, "baseline") == ["error"] * 3
        assert httpx.get(stack.url + "/healthz").json()["routes_down"]["base"]["failures"] == 3
