"""The sweep: for each concurrency level, blocks of requests to the baseline and each
candidate arm in turn (never two at once), until the level's speedup is precise enough, its
request cap is reached, or its share of the time budget is spent. Each block holds the
level's concurrency while it measures (`gate.rehearse.runner.run_block`), and the level
reports the concurrency each route was actually held at.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import httpx

from gate.engines.workload import WorkloadItem
from gate.rehearse.analysis import precise, speedup
from gate.rehearse.runner import Block, Route, Sample, check_reachable, cycle, run_block

Stop = Literal["precise", "cap", "budget"]


@dataclass(frozen=True)
class Plan:
    """How long and how hard to rehearse."""

    levels: list[int]
    budget_s: float
    min_requests: int = 16  # per route and level before the precision rule may stop it
    max_requests: int = 400  # per route and level
    precision: float = 0.10  # stop once the interval is this narrow relative to the estimate
    block_per_worker: int = 2  # a block sends this many requests per concurrent worker
    timeout_s: float = 120.0


@dataclass
class Level:
    """What one concurrency level measured, and why it stopped."""

    concurrency: int
    blocks: list[Block] = field(default_factory=list)
    stop: Stop | None = None
    elapsed_s: float = 0.0

    def samples(self, route: str) -> list[Sample]:
        """Return one route's samples at this level."""
        return [s for b in self.blocks if b.route == route for s in b.samples]

    def reached(self, route: str) -> float:
        """Return the requests one route had in flight on average while it was measured."""
        blocks = [b for b in self.blocks if b.route == route]
        wall = sum(b.wall_s for b in blocks)
        return sum(b.busy_s for b in blocks) / wall if wall else 0.0


def levels_up_to(top: int) -> list[int]:
    """Return 1, 2, 4, … up to `top` (and `top` itself when it is not a power of two)."""
    out = [1]
    while out[-1] * 2 <= top:
        out.append(out[-1] * 2)
    return out if out[-1] == top else [*out, top]


async def check_routes(routes: tuple[Route, ...], timeout_s: float) -> None:
    """Fail with one line unless every route answers `GET /models`."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10)) as client:
        for route in routes:
            await check_reachable(client, route)


async def rehearse(
    routes: tuple[Route, ...],
    items: list[WorkloadItem],
    plan: Plan,
    progress: Callable[[str], None],
) -> list[Level]:
    """Check the routes (the baseline first, then the arms), warm them up, then run every
    level of the plan."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(plan.timeout_s, connect=10)) as client:
        for route in routes:
            await check_reachable(client, route)
        for route in routes:  # the first request pays for loading; it is not measured
            await run_block(client, route, cycle(items), concurrency=1, count=1,
                            timeout_s=plan.timeout_s)  # fmt: skip
        start = time.monotonic()
        done: list[Level] = []
        for i, concurrency in enumerate(plan.levels):
            left = plan.budget_s - (time.monotonic() - start)
            share = left / (len(plan.levels) - i)
            done.append(await _level(client, routes, items, plan, concurrency, share, progress))
        return done


async def _level(
    client: httpx.AsyncClient,
    routes: tuple[Route, ...],
    items: list[WorkloadItem],
    plan: Plan,
    concurrency: int,
    share_s: float,
    progress: Callable[[str], None],
) -> Level:
    level = Level(concurrency)
    # Each route starts from the same request, so all see the same mix of prompts; the
    # unmeasured requests that hold the load come from a stream of their own.
    streams = {route.name: cycle(items) for route in routes}
    fillers = {route.name: cycle(items) for route in routes}
    count = max(concurrency * plan.block_per_worker, 2)
    start = time.monotonic()
    while level.stop is None:
        for route in routes:
            block = await run_block(client, route, streams[route.name],
                                    concurrency=concurrency, count=count,
                                    timeout_s=plan.timeout_s,
                                    filler=fillers[route.name])  # fmt: skip
            level.blocks.append(block)
        level.elapsed_s = time.monotonic() - start
        level.stop = _stop(level, routes, plan, share_s)
        progress(_line(level, routes))
    return level


def _stop(level: Level, routes: tuple[Route, ...], plan: Plan, share_s: float) -> Stop | None:
    base = level.samples(routes[0].name)
    arms = [level.samples(r.name) for r in routes[1:]]
    n = min(len(base), *(len(arm) for arm in arms))
    # Every arm's speedup must be precise: the level compares them all on the same load.
    if n >= plan.min_requests and all(precise(speedup(base, arm), plan.precision) for arm in arms):
        return "precise"
    if n >= plan.max_requests:
        return "cap"
    rounds = len(level.blocks) // len(routes)
    # Stop before a further round of blocks would overrun the level's share of the budget.
    if level.elapsed_s + level.elapsed_s / rounds > share_s:
        return "budget"
    return None


def _line(level: Level, routes: tuple[Route, ...]) -> str:
    base = level.samples(routes[0].name)
    shown = []
    for route in routes[1:]:
        value = speedup(base, level.samples(route.name))
        named = f"{route.name} " if len(routes) > 2 else ""
        shown.append(named + (f"{value.estimate:.2f} [{value.low:.2f}, {value.high:.2f}]"
                              if value else "n/a"))  # fmt: skip
    state = f"stopped ({level.stop})" if level.stop else "running"
    held = "/".join(f"{level.reached(r.name):.1f}" for r in routes)
    counts = "+".join(str(len(level.samples(r.name))) for r in routes)
    return (
        f"concurrency {level.concurrency}: {counts} requests in "
        f"{level.elapsed_s:.0f} s, in flight {held}, speedup {', '.join(shown)}, {state}"
    )
