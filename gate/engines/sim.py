"""The synthetic engine (`--model sim`): configurable latency, acceptance and failures.

For load tests, benchmarks and fault tests only; it generates no language. Its output is
a deterministic function of the request, so two calls with one body answer alike.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gate.engines.base import CacheUse
from gate.engines.metrics import CONTENT_TYPE, EngineMetrics, Finished
from gate.engines.spec import SpecStats

Failure = Literal["none", "status500", "hang", "garbage", "broken_stream"]


@dataclass
class SimProfile:
    """How the synthetic engine behaves."""

    model: str = "sim"
    ttft_s: float = 0.02
    tokens: int = 32
    token_interval_s: float = 0.0
    # Speculative profile: k draft tokens per step, each accepted with this probability.
    spec_tokens: int = 0
    acceptance: float = 0.0
    failure: Failure = "none"
    # Like OpenAI's API: with include_usage, every chunk carries "usage": null until the last.
    null_usage: bool = False
    # Like vLLM with --enable-per-request-metrics: modelled timings in `metrics`.
    per_request_metrics: bool = False
    # Like an engine that cannot return log-probabilities: a request asking is a 400.
    rejects_logprobs: bool = False
    # The modelled KV cache, in positions: each answer being sent holds its prompt and the
    # tokens sent so far (`vllm:kv_cache_usage_perc`).
    kv_positions: int = 4096


@dataclass
class SimLog:
    """What the engine saw, for tests: request bodies and abandoned streams."""

    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    cancelled: int = 0


def create_sim_app(profile: SimProfile, log: SimLog | None = None) -> Starlette:
    """Build the synthetic engine's ASGI app."""
    seen = log if log is not None else SimLog()
    cache = CacheUse(profile.kv_positions)
    metrics = EngineMetrics(
        profile.model,
        spec_tokens=max(0, profile.spec_tokens),
        backend="sim",
        cache_usage=cache.share,
    )

    async def completion(request: Request) -> Response:
        chat = request.url.path.endswith("/chat/completions")
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return _error(400, "invalid JSON")
        if not isinstance(body, dict) or (chat and not body.get("messages")):
            return _error(400, "'messages' is required")
        seen.bodies.append(body)
        seen.headers.append(dict(request.headers))
        if profile.rejects_logprobs and _asks_logprobs(body):
            return _error(400, "logprobs are not supported by this engine")
        response = await _answer(profile, seen, body, chat=chat, cache=cache)
        if response.status_code == 200 and profile.failure == "none":
            metrics.observe(_modelled(profile, body))
        return response

    async def models(_request: Request) -> Response:
        data = [{"id": profile.model, "object": "model", "created": 0, "owned_by": "sim"}]
        return Response(
            orjson.dumps({"object": "list", "data": data}), media_type="application/json"
        )

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completion, methods=["POST"]),
            Route("/v1/completions", completion, methods=["POST"]),
            Route("/v1/models", models),
            Route("/metrics", lambda _r: Response(metrics.render(), media_type=CONTENT_TYPE)),
        ]
    )


async def _answer(
    profile: SimProfile, log: SimLog, body: dict[str, Any], *, chat: bool, cache: CacheUse
) -> Response:
    if profile.failure == "status500":
        return _error(500, "simulated engine failure")
    if profile.failure == "hang":
        await asyncio.sleep(3600)
    if profile.failure == "garbage":
        return Response(b"<html>502 bad gateway</html>", media_type="application/json")
    words = _words(body, _max_tokens(body, profile.tokens))
    prompt = orjson.dumps([body.get("messages"), body.get("prompt"), body.get("seed")])
    ident = "sim-" + hashlib.sha256(prompt).hexdigest()[:24]
    held = _Held(cache, _usage(body, [])["prompt_tokens"])
    if body.get("stream"):
        stream = _stream(profile, log, body, words, ident, chat=chat, held=held)
        return StreamingResponse(stream, media_type="text/event-stream")
    held.sent(0)  # nothing is sent before the whole answer
    try:
        await asyncio.sleep(profile.ttft_s + profile.token_interval_s * max(0, len(words) - 1))
    finally:
        held.release()
    return Response(
        orjson.dumps(_whole(profile, body, words, ident, chat=chat)), media_type="application/json"
    )


_VOCABULARY = ("alpha", "beta", "gamma", "delta", "tokens", "draft", "verify", "accept")


def _words(body: dict[str, Any], count: int) -> list[str]:
    source = orjson.dumps(body.get("messages") or body.get("prompt") or "")
    seed = hashlib.sha256(source).digest()
    return [_VOCABULARY[seed[i % len(seed)] % len(_VOCABULARY)] + " " for i in range(count)]


def _max_tokens(body: dict[str, Any], default: int) -> int:
    limit = body.get("max_tokens") or body.get("max_completion_tokens")
    return min(default, int(limit)) if isinstance(limit, int) and limit > 0 else default


def _spec(profile: SimProfile, tokens: int) -> dict[str, Any] | None:
    """vLLM's per-request speculative metrics shape, from the expected acceptance."""
    if profile.spec_tokens <= 0:
        return None
    k, p = profile.spec_tokens, profile.acceptance
    per_step = 1 + (p * (1 - p**k) / (1 - p) if p < 1 else k)
    steps = max(1, math.ceil(tokens / per_step))
    accepted = max(0, tokens - steps)
    return {
        "num_spec_steps": steps,
        "num_draft_tokens": steps * k,
        "num_accepted_draft_tokens": accepted,
        "draft_acceptance_rate": accepted / (steps * k),
        "mean_acceptance_length": 1 + accepted / steps,
    }


def _modelled(profile: SimProfile, body: dict[str, Any]) -> Finished:
    """What the engine's /metrics count for one answer: its modelled timings and drafts."""
    words = _words(body, _max_tokens(body, profile.tokens))
    spec, stats = _spec(profile, len(words)), None
    if spec:
        stats = SpecStats(profile.spec_tokens)
        steps, accepted = spec["num_spec_steps"], spec["num_accepted_draft_tokens"]
        for step in range(steps):  # spread the accepted drafts evenly over the steps
            stats.observe(profile.spec_tokens, accepted // steps + (step < accepted % steps))
    e2e = profile.ttft_s + profile.token_interval_s * max(0, len(words) - 1)
    usage = _usage(body, words)
    finish = "length" if words else "stop"
    return Finished(finish, usage["prompt_tokens"], len(words), e2e, 0.0, profile.ttft_s, stats)


def _usage(body: dict[str, Any], words: list[str]) -> dict[str, int]:
    prompt = len(orjson.dumps(body.get("messages") or body.get("prompt") or "")) // 4
    return {
        "prompt_tokens": prompt,
        "completion_tokens": len(words),
        "total_tokens": prompt + len(words),
    }


def _whole(
    profile: SimProfile, body: dict[str, Any], words: list[str], ident: str, *, chat: bool
) -> dict[str, Any]:
    text = "".join(words)
    choice: dict[str, Any] = {"index": 0, "finish_reason": "length" if words else "stop"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    if _asks_logprobs(body):
        choice["logprobs"] = _logprobs(words, chat=chat, top=_top(body, chat=chat))
    answer: dict[str, Any] = {
        "id": ident,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": profile.model,
        "choices": [choice],
        "usage": _usage(body, words),
    }
    metrics = _metrics(profile, len(words))
    if metrics:
        answer["metrics"] = metrics
    return answer


def _asks_logprobs(body: dict[str, Any]) -> bool:
    # `logprobs: 0` on completions asks for the sampled tokens' own (0 == False in Python).
    value = body.get("logprobs")
    return value is not None and value is not False


def _top(body: dict[str, Any], *, chat: bool) -> int:
    """Return how many alternatives per token the request asks for (0: none)."""
    value = body.get("top_logprobs") if chat else body.get("logprobs")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _logprobs(words: list[str], *, chat: bool, start: int = 0, top: int = 0) -> dict[str, Any]:
    """Return made-up log-probabilities, one per word (the first at position `start` of
    the answer), with `top` made-up alternatives each, in the request's OpenAI shape."""
    values = [-0.25 * (1 + i % 4) for i in range(start, start + len(words))]
    alternatives = [_alternatives(w, v, top) for w, v in zip(words, values, strict=True)]
    if not chat:
        tops = [dict(a) for a in alternatives] if top else None
        return {"tokens": words, "token_logprobs": values, "top_logprobs": tops}
    entries = zip(words, values, alternatives, strict=True)
    return {
        "content": [
            {"token": w, "logprob": v, "bytes": list(w.encode()), "top_logprobs": _entries(a)}
            for w, v, a in entries
        ]
    }


def _alternatives(word: str, logprob: float, top: int) -> list[tuple[str, float]]:
    """The `top` most likely tokens at a position: the emitted word first, then the rest
    of the vocabulary sharing 90 % of what it leaves (a tenth stays unlisted)."""
    others = [w + " " for w in _VOCABULARY if w + " " != word]
    rest = math.log(0.9 * (1.0 - math.exp(logprob)) / len(others))
    return [(word, logprob), *((w, rest) for w in others)][:top]


def _entries(alternatives: list[tuple[str, float]]) -> list[dict[str, Any]]:
    return [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in alternatives]


def _metrics(profile: SimProfile, tokens: int) -> dict[str, Any]:
    """The per-request `metrics` block: speculative stats and, if profiled, timings."""
    metrics: dict[str, Any] = {}
    spec = _spec(profile, tokens)
    if spec:
        metrics["speculative_decoding"] = spec
    if profile.per_request_metrics:
        generation_s = profile.ttft_s + profile.token_interval_s * max(0, tokens - 1)
        metrics["queue_time_ms"] = 0.0
        metrics["time_to_first_token_ms"] = profile.ttft_s * 1000
        metrics["generation_time_ms"] = generation_s * 1000
    return metrics


@dataclass
class _Held:
    """One streamed answer's hold on the modelled KV cache."""

    cache: CacheUse
    prompt: int

    def sent(self, tokens: int) -> None:
        """Hold the prompt and the `tokens` sent so far."""
        self.cache.hold(id(self), self.prompt + tokens)

    def release(self) -> None:
        """Free it all: the answer has ended."""
        self.cache.release(id(self))


async def _stream(
    profile: SimProfile,
    log: SimLog,
    body: dict[str, Any],
    words: list[str],
    ident: str,
    *,
    chat: bool,
    held: _Held,
) -> AsyncIterator[bytes]:
    created = int(time.time())
    kind = "chat.completion.chunk" if chat else "text_completion"
    options = body.get("stream_options")
    usage_asked = isinstance(options, dict) and bool(options.get("include_usage"))
    top = _top(body, chat=chat)
    try:
        held.sent(0)
        await asyncio.sleep(profile.ttft_s)
        for i, word in enumerate(words):
            held.sent(i + 1)
            if i and profile.token_interval_s:
                await asyncio.sleep(profile.token_interval_s)
            if profile.failure == "broken_stream" and i == len(words) // 2:
                yield b"data: {not json\n\n"
                return
            delta: dict[str, Any] = {
                "index": 0,
                "finish_reason": "length" if i == len(words) - 1 else None,
            }
            if chat:
                delta["delta"] = {"content": word} if i else {"role": "assistant", "content": word}
            else:
                delta["text"] = word
            if _asks_logprobs(body):
                delta["logprobs"] = _logprobs([word], chat=chat, start=i, top=top)
            chunk = {
                "id": ident,
                "object": kind,
                "created": created,
                "model": profile.model,
                "choices": [delta],
            }
            if profile.null_usage and usage_asked:
                chunk["usage"] = None
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
        if usage_asked:
            final: dict[str, Any] = {
                "id": ident,
                "object": kind,
                "created": created,
                "model": profile.model,
                "choices": [],
                "usage": _usage(body, words),
            }
            metrics = _metrics(profile, len(words))
            if metrics:
                final["metrics"] = metrics
            yield b"data: " + orjson.dumps(final) + b"\n\n"
        yield b"data: [DONE]\n\n"
    except (asyncio.CancelledError, GeneratorExit):
        log.cancelled += 1
        raise
    finally:
        held.release()


def _error(status: int, message: str) -> Response:
    body = {
        "error": {
            "message": message,
            "type": "invalid_request_error" if status < 500 else "internal_error",
            "param": None,
            "code": None,
        }
    }
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")
