"""Closed-loop load against one route: `concurrency` workers, each sending its next request
as soon as the previous one ended, every request streamed and timed on arrival of its chunks.

A block holds its concurrency for as long as it measures: each worker's first request
warms the route up, unmeasured; then the workers take the block's measured requests; and
while the last of those are still running, the workers that are done keep the load up with
further unmeasured requests. A block that simply drained would serve its slowest requests
at a falling load, flattering whichever route is hurt more by load. The block ends once
those unmeasured requests have ended too (not cancelled: an engine frees an abandoned
request only some time later, and the other route's next block must find this one idle).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import orjson

from gate.engines.workload import WorkloadItem
from gate.errors import GateError


@dataclass(frozen=True)
class Route:
    """A route under test: its name in the report and its OpenAI base URL (…/v1)."""

    name: str
    base_url: str
    model: str | None = None


@dataclass(frozen=True)
class Sample:
    """One replayed request as the client saw it."""

    segment: str
    ok: bool
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    item: str = ""  # the workload request it replayed: both routes replay the same ones

    @property
    def tpot_s(self) -> float | None:
        """Return the time per output token after the first, or None for one token."""
        return (self.e2e_s - self.ttft_s) / (self.tokens - 1) if self.tokens > 1 else None


@dataclass(frozen=True)
class Block:
    """One block of requests to one route at one concurrency.

    The measurement window runs from `start` (`time.perf_counter()`), the first measured
    request's start, for `wall_s`, to the last one's end; `busy_s` is the request-seconds
    in flight meanwhile (measured or not), so `busy_s / wall_s` is the concurrency the
    route was actually held at while it was measured.
    """

    route: str
    concurrency: int
    wall_s: float
    samples: list[Sample]
    busy_s: float = 0.0
    start: float = 0.0


@dataclass
class _Flight:
    """When each request of a block was in flight, and which of them were measured."""

    spans: list[tuple[float, float]] = field(default_factory=list)
    measured: list[tuple[float, float]] = field(default_factory=list)

    def window(self) -> tuple[float, float]:
        """Return the measured requests' first start and last end."""
        return min(s for s, _ in self.measured), max(e for _, e in self.measured)

    def busy_s(self, start: float, end: float) -> float:
        """Return the request-seconds in flight between `start` and `end`."""
        return sum(max(0.0, min(e, end) - max(s, start)) for s, e in self.spans)


def cycle(items: list[WorkloadItem]) -> Iterator[WorkloadItem]:
    """Return the workload repeated forever, in its interleaved order."""
    return itertools.cycle(items)


async def check_reachable(client: httpx.AsyncClient, route: Route) -> None:
    """Fail with one line unless the route answers `GET /models`."""
    url = f"{route.base_url}/models"
    try:
        response = await client.get(url, timeout=10)
    except httpx.HTTPError as exc:
        raise GateError(
            f"{route.name} route {route.base_url} is unreachable ({_why(exc)})"
        ) from None
    if response.status_code >= 400:
        raise GateError(
            f"{route.name} route {route.base_url} answered GET /models with {response.status_code}"
        )


async def run_block(
    client: httpx.AsyncClient,
    route: Route,
    requests: Iterator[WorkloadItem],
    *,
    concurrency: int,
    count: int,
    timeout_s: float,
    filler: Iterator[WorkloadItem] | None = None,
) -> Block:
    """Measure the next `count` requests with `concurrency` held in flight throughout.

    With `filler`, each worker first sends one unmeasured request from it, and workers
    with nothing left to measure send more until the measured ones have all ended.
    """
    todo = itertools.islice(requests, count)
    samples: list[Sample] = []
    flight = _Flight()
    done = asyncio.Event()

    async def timed(item: WorkloadItem, *, measured: bool) -> Sample:
        start = time.perf_counter()
        sample = await measure(client, route, item, timeout_s=timeout_s)
        span = (start, time.perf_counter())
        flight.spans.append(span)
        if measured:
            flight.measured.append(span)
        return sample

    async def worker() -> None:  # ends once nothing measured is left running
        if filler is not None:
            await timed(next(filler), measured=False)
        for item in todo:  # the iterator is shared: each worker takes the next request
            samples.append(await timed(item, measured=True))
            if len(samples) == count:
                done.set()
        while filler is not None and not done.is_set():
            await timed(next(filler), measured=False)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    start, end = flight.window()
    return Block(route.name, concurrency, end - start, samples, flight.busy_s(start, end), start)


async def measure(
    client: httpx.AsyncClient, route: Route, item: WorkloadItem, *, timeout_s: float
) -> Sample:
    """Stream one request; an HTTP error, a broken stream or a timeout is a failed sample."""
    body: dict[str, Any] = {**item.engine_body, "stream": True}
    body["stream_options"] = {"include_usage": True}
    if route.model:
        body["model"] = route.model
    start = time.perf_counter()
    url = route.base_url + item.path.removeprefix("/v1")
    try:
        async with asyncio.timeout(timeout_s):
            sample = await _stream(client, url, body, item.segment, start)
    except (httpx.HTTPError, TimeoutError, ValueError):
        sample = Sample(item.segment, ok=False, e2e_s=time.perf_counter() - start)
    return replace(sample, item=item.id)


async def _stream(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], segment: str, start: float
) -> Sample:
    first: float | None = None
    chunks = 0
    usage: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    async with client.stream("POST", url, json=body) as response:
        if response.status_code >= 400:
            return Sample(segment, ok=False, e2e_s=time.perf_counter() - start)
        async for line in response.aiter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            chunk = orjson.loads(line[5:])
            if not isinstance(chunk, dict) or "error" in chunk:
                return Sample(segment, ok=False, e2e_s=time.perf_counter() - start)
            if any(_text(choice) for choice in chunk.get("choices") or ()):
                first = first if first is not None else time.perf_counter()
                chunks += 1
            usage = chunk.get("usage") or usage
            spec = (chunk.get("metrics") or {}).get("speculative_decoding") or spec
    end = time.perf_counter()
    if first is None:
        return Sample(segment, ok=False, e2e_s=end - start)
    return Sample(
        segment,
        ok=True,
        ttft_s=first - start,
        e2e_s=end - start,
        tokens=int(usage.get("completion_tokens") or chunks),
        drafted=int(spec.get("num_draft_tokens") or 0),
        accepted=int(spec.get("num_accepted_draft_tokens") or 0),
    )


def _text(choice: dict[str, Any]) -> str:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return str(delta.get("content") or "") or ("x" if delta.get("tool_calls") else "")
    return str(choice.get("text") or "")


def _why(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "connection refused or no such host"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return type(exc).__name__
