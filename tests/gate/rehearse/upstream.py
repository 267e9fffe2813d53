"""The network edge for rehearsal tests: an OpenAI-style streaming server whose gap between
tokens grows with the requests it is serving at once, as a busy engine's does."""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Engine:
    """Token gap = `gap_s` + `per_request_s` * (requests in flight - 1)."""

    gap_s: float
    per_request_s: float = 0.0
    tokens: int = 6
    drafted: int = 0
    accepted: int = 0
    fail: bool = False
    seen: list[int] = field(default_factory=list)  # in-flight count at each arrival
    inflight: int = 0
    peer: Engine | None = None  # the other route: its in-flight count at each arrival
    peer_seen: list[int] = field(default_factory=list)
    by_max_tokens: bool = False  # answer each request's max_tokens tokens, not `tokens`
    # Unstreamed answers (the exactness phase's) report two tokens at probability 1/2 each
    # per position; "exact" emits them in turn (each half the time, so the test sees a
    # perfect fit and cannot fail it by chance), "lossy" always emits the first.
    sampler: str = "exact"
    emitted: int = 0
    # (time, requests in flight from then on), one entry per change
    timeline: list[tuple[float, int]] = field(default_factory=list)

    def change(self, by: int) -> None:
        """Move the in-flight count and note when."""
        self.inflight += by
        self.timeline.append((time.perf_counter(), self.inflight))

    def average(self, windows: list[tuple[float, float]]) -> float:
        """Return the time-averaged requests in flight within `windows` (start, end)."""
        area = 0.0
        for (start, count), (end, _) in zip(self.timeline, self.timeline[1:], strict=False):
            for low, high in windows:
                area += count * max(0.0, min(end, high) - max(start, low))
        return area / sum(high - low for low, high in windows)


def engine_app(engine: Engine) -> Starlette:
    """Serve `engine` at /v1/models and /v1/chat/completions (streamed)."""

    async def models(_request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def chat(request: Request) -> Response:
        body = await request.json()
        if engine.fail:
            return JSONResponse({"error": {"message": "boom"}}, status_code=500)
        if not body.get("stream"):
            return JSONResponse(_answer(engine, body))
        engine.change(+1)
        engine.seen.append(engine.inflight)
        engine.peer_seen.append(engine.peer.inflight if engine.peer else 0)
        tokens = int(body["max_tokens"]) if engine.by_max_tokens else engine.tokens
        return StreamingResponse(_stream(engine, tokens), media_type="text/event-stream")

    async def timeline(_request: Request) -> Response:
        return JSONResponse(engine.timeline)

    return Starlette(
        routes=[
            Route("/v1/models", models),
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/timeline", timeline),
        ]
    )


@contextmanager
def serving_apart(engine: Engine) -> Iterator[str]:
    """Serve `engine` from its own process; on exit copy its timeline back into `engine`.

    In-process, the upstream's thread waits for the client's interpreter lock, so it sees a
    request later than the client sent it; apart, it sees what a real engine would. Both
    processes read the same clock (`perf_counter` is CLOCK_MONOTONIC on Linux).
    """
    import httpx

    spawn = multiprocessing.get_context("spawn")
    parent, child = spawn.Pipe()
    proc = spawn.Process(target=_serve_apart, args=(engine, child), daemon=True)
    proc.start()
    try:
        if not parent.poll(30):
            raise RuntimeError("upstream process did not start")
        base = parent.recv()
        yield base
        engine.timeline = [tuple(entry) for entry in httpx.get(f"{base}/timeline").json()]
    finally:
        parent.send("stop")
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()


def _serve_apart(engine: Engine, conn) -> None:  # type: ignore[no-untyped-def]
    from tests.servers import serving

    with serving(engine_app(engine)) as base:
        conn.send(base)
        conn.recv()


async def _stream(engine: Engine, tokens: int):  # type: ignore[no-untyped-def]
    try:
        for _ in range(tokens):
            await asyncio.sleep(engine.gap_s + engine.per_request_s * (engine.inflight - 1))
            yield _sse({"choices": [{"index": 0, "delta": {"content": "tok "}}]})
        spec = {"num_draft_tokens": engine.drafted, "num_accepted_draft_tokens": engine.accepted}
        usage = {"completion_tokens": tokens, "prompt_tokens": 3}
        yield _sse({"choices": [], "usage": usage, "metrics": {"speculative_decoding": spec}})
        yield b"data: [DONE]\n\n"
    finally:
        engine.change(-1)


def _answer(engine: Engine, body: dict) -> dict:
    """Return an unstreamed chat answer whose logprobs describe how it was sampled."""
    half = math.log(0.5)
    greedy = not body.get("temperature")
    content = []
    for _ in range(min(engine.tokens, int(body.get("max_tokens") or engine.tokens))):
        engine.emitted += 1
        lossy = greedy or engine.sampler == "lossy"
        token = "a" if lossy or engine.emitted % 2 else "b"
        alternatives = [{"token": t, "logprob": half} for t in ("a", "b")]
        content.append({"token": token, "logprob": half, "top_logprobs": alternatives})
    text = "".join(entry["token"] for entry in content)
    message = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "logprobs": {"content": content}}
    return {"choices": [choice], "usage": {"completion_tokens": len(content)}}


def _sse(body: dict) -> bytes:
    return b"data: " + orjson.dumps(body) + b"\n\n"
