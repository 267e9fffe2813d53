"""OpenAI response bodies and SSE chunks, with vLLM's per-request `metrics` block."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from gate.engines.base import GenerationResult, GenRequest


@dataclass
class Timing:
    """One request's clock: arrival, time in queue, first token and end."""

    arrived: float = field(default_factory=time.perf_counter)
    started: float | None = None
    first_token: float | None = None
    ended: float | None = None

    @property
    def queue_s(self) -> float:
        """Return the seconds spent waiting for the engine."""
        return (self.started or self.arrived) - self.arrived

    @property
    def ttft_s(self) -> float | None:
        """Return the time to first token from arrival (queue included, as vLLM counts it)."""
        return None if self.first_token is None else self.first_token - self.arrived

    @property
    def e2e_s(self) -> float:
        """Return the seconds from arrival to the end."""
        return (self.ended or time.perf_counter()) - self.arrived


@dataclass(frozen=True)
class Envelope:
    """The fields every chunk or body of one response shares."""

    request: GenRequest
    model: str
    ident: str
    created: int

    @classmethod
    def new(cls, request: GenRequest, model: str) -> Envelope:
        """Start the envelope of a fresh response."""
        prefix = "chatcmpl" if request.chat else "cmpl"
        return cls(request, model, f"{prefix}-{uuid.uuid4().hex}", int(time.time()))

    def _base(self, *, chunk: bool) -> dict[str, Any]:
        kind = "text_completion"
        if self.request.chat:
            kind = "chat.completion.chunk" if chunk else "chat.completion"
        return {"id": self.ident, "object": kind, "created": self.created, "model": self.model}

    def whole(self, outcome: GenerationResult, timing: Timing) -> dict[str, Any]:
        """Return the non-streamed response body."""
        choice: dict[str, Any] = {"index": 0, "logprobs": self._logprobs(outcome.logprobs)}
        if self.request.chat:
            message: dict[str, Any] = {"role": "assistant", "content": outcome.text}
            if outcome.tool_calls:
                message.update(content=None, tool_calls=outcome.tool_calls)
            choice["message"] = message
        else:
            choice["text"] = outcome.text
        choice["finish_reason"] = outcome.finish_reason
        return {
            **self._base(chunk=False),
            "choices": [choice],
            "usage": usage(outcome),
            "metrics": request_metrics(outcome, timing),
        }

    def delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        """Return one SSE chunk carrying a delta (or the closing finish reason)."""
        delta = dict(delta)
        logprobs = self._logprobs(delta.pop("logprobs", None))
        choice: dict[str, Any] = {"index": 0, "logprobs": logprobs}
        if self.request.chat:
            choice["delta"] = delta
        else:
            choice["text"] = delta.get("content", "")
        choice["finish_reason"] = finish_reason
        return sse({**self._base(chunk=True), "choices": [choice]})

    def _logprobs(self, entries: list[dict[str, Any]] | None) -> dict[str, Any] | None:
        """Return a choice's `logprobs`: chat's `content` list, or the completions columns."""
        if entries is None or not self.request.logprobs:
            return None
        if self.request.chat:
            return {"content": entries, "refusal": None}
        offsets, at = [], 0
        for entry in entries:
            offsets.append(at)
            at += len(entry["token"])
        return {
            "tokens": [e["token"] for e in entries],
            "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [_top(e) for e in entries],
            "text_offset": offsets,
        }

    def usage_chunk(self, outcome: GenerationResult, timing: Timing) -> bytes:
        """Return the final usage chunk, which carries the per-request metrics."""
        body = {**self._base(chunk=True), "choices": [], "usage": usage(outcome)}
        return sse({**body, "metrics": request_metrics(outcome, timing)})


def _top(entry: dict[str, Any]) -> dict[str, float]:
    return {t["token"]: t["logprob"] for t in entry["top_logprobs"]}


def usage(outcome: GenerationResult) -> dict[str, int]:
    """Return the OpenAI usage block."""
    return {
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": outcome.completion_tokens,
        "total_tokens": outcome.prompt_tokens + outcome.completion_tokens,
    }


def request_metrics(outcome: GenerationResult, timing: Timing) -> dict[str, Any]:
    """Return vLLM's per-request `metrics`: timings, and speculative stats when configured."""
    start = timing.started or timing.arrived
    end = timing.ended or time.perf_counter()
    first = timing.first_token
    decode_s = end - first if first is not None else 0.0
    tokens = outcome.completion_tokens
    metrics: dict[str, Any] = {
        "queue_time_ms": round(timing.queue_s * 1000, 3),
        "time_to_first_token_ms": None if first is None else round((first - start) * 1000, 3),
        "generation_time_ms": round((end - start) * 1000, 3),
        "mean_itl_ms": round(decode_s / (tokens - 1) * 1000, 3) if tokens > 1 else None,
        "tokens_per_second": round(tokens / (end - start), 3) if end > start else None,
    }
    if outcome.spec is not None:
        metrics["speculative_decoding"] = outcome.spec.summary()
    return metrics


def sse(body: dict[str, Any]) -> bytes:
    """Encode one server-sent event."""
    return b"data: " + orjson.dumps(body) + b"\n\n"


def error_body(status: int, message: str) -> bytes:
    """Return an OpenAI-style error body."""
    kind = "invalid_request_error" if status < 500 else "internal_error"
    return orjson.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": status}}
    )
