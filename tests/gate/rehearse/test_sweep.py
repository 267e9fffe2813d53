"""The sweep's stopping rules (precise enough, request cap, time budget) and its alternation:
the two routes never serve the rehearsal at the same time."""

from __future__ import annotations

import asyncio

import pytest

from gate.engines.workload import parse_jsonl
from gate.rehearse.runner import Route
from gate.rehearse.sweep import Plan, levels_up_to, rehearse
from tests.gate.rehearse.upstream import Engine, engine_app, serving_apart
from tests.servers import serving

ITEMS = parse_jsonl('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}\n' * 3)


def sweep(plan: Plan, baseline: Engine, candidate: Engine, items=ITEMS, serve=None):
    lines: list[str] = []
    serve = serve or (lambda engine: serving(engine_app(engine)))
    with serve(baseline) as base, serve(candidate) as cand:
        routes = (Route("baseline", f"{base}/v1"), Route("candidate", f"{cand}/v1"))
        levels = asyncio.run(rehearse(routes, items, plan, lines.append))
    return levels, lines


def test_levels_double_up_to_the_limit():
    assert levels_up_to(1) == [1]
    assert levels_up_to(8) == [1, 2, 4, 8]
    assert levels_up_to(12) == [1, 2, 4, 8, 12]


def test_a_level_stops_once_precise_after_the_minimum_requests():
    plan = Plan(levels=[1, 2], budget_s=120, min_requests=8, precision=0.5)
    # Token gaps long beside a loaded host's stalls (tens of ms): with 10 and 4 ms a few
    # stalls among 8 requests of 24 ms kept the interval wide, and the level went on (CI).
    levels, lines = sweep(plan, Engine(gap_s=0.05), Engine(gap_s=0.02))
    assert [level.stop for level in levels] == ["precise", "precise"]
    # Blocks of 2 requests per worker and route: the first round with 8 a side stops it.
    assert [len(level.samples("candidate")) for level in levels] == [8, 8]
    assert len(lines) == 4 + 2 and "stopped (precise)" in lines[-1]


def test_a_level_that_never_gets_precise_stops_at_the_request_cap():
    plan = Plan(levels=[1], budget_s=120, min_requests=4, max_requests=6, precision=1e-9)
    levels, _ = sweep(plan, Engine(gap_s=0.002), Engine(gap_s=0.002))
    assert levels[0].stop == "cap"
    assert len(levels[0].samples("baseline")) == len(levels[0].samples("candidate")) == 6


def test_a_level_stops_when_its_share_of_the_budget_is_spent():
    plan = Plan(levels=[1, 2], budget_s=0.5, max_requests=10_000, precision=1e-9)
    levels, _ = sweep(plan, Engine(gap_s=0.005), Engine(gap_s=0.005))
    assert [level.stop for level in levels] == ["budget", "budget"]
    assert all(level.samples("candidate") for level in levels)


@pytest.mark.parametrize("concurrency", [4])
def test_the_routes_run_in_alternating_blocks_never_at_once(concurrency):
    baseline, candidate = Engine(gap_s=0.004), Engine(gap_s=0.004)
    baseline.peer, candidate.peer = candidate, baseline
    plan = Plan(levels=[concurrency], budget_s=120, min_requests=16, precision=1.0)
    sweep(plan, baseline, candidate)
    assert max(baseline.seen) == max(candidate.seen) == concurrency  # load was real
    assert set(baseline.peer_seen) == set(candidate.peer_seen) == {0}


@pytest.mark.parametrize("concurrency", [4, 16])
def test_a_level_holds_its_concurrency_at_the_upstream_and_reports_it(concurrency):
    # Answers of 2 to 30 tokens: a block that drained its last requests would leave the
    # upstream serving fewer than the level for the long answers' tails.
    lines = [f'{{"messages": [{{"role": "user", "content": "q{n}"}}], "max_tokens": {n}}}'
             for n in range(2, 31, 4)]  # fmt: skip
    items = parse_jsonl("\n".join(lines) + "\n")
    # Token gaps long enough that a worker's turnaround (its client's share of one busy
    # core) stays a small part of each request, as it is against a real engine.
    baseline = Engine(gap_s=0.05, by_max_tokens=True)
    candidate = Engine(gap_s=0.04, by_max_tokens=True)
    plan = Plan(levels=[concurrency], budget_s=120, min_requests=16, max_requests=64,
                precision=1.0)  # fmt: skip
    # Each upstream in its own process, as a real engine is: measured in this one, it would
    # see each request only when this interpreter let its thread run.
    (level,), _ = sweep(plan, baseline, candidate, items, serve=serving_apart)
    for route, engine in (("baseline", baseline), ("candidate", candidate)):
        # Measured at the upstream (the same clock: it runs in this process): the requests
        # it had in flight, time-averaged over the windows in which the route was measured.
        windows = [(b.start, b.start + b.wall_s) for b in level.blocks if b.route == route]
        # (What falls short is each worker's gap between one answer and its next request.)
        assert concurrency * 0.95 <= engine.average(windows) <= concurrency
        assert level.reached(route) == pytest.approx(engine.average(windows), rel=0.03)
