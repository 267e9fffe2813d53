"""Token log-probabilities on sampled pairs' calls: ask the routes, summarise, strip.

The sampled-parity guardrail (`gate.parity`) compares the mean log-probability of the two
sides' answers. On a sampled pair's calls the gateway asks both routes for `logprobs`
alike, keeps a per-call summary for the collector (never the arrays), and removes them
from the client's answer when the client did not ask. A route that rejects `logprobs`
(a 4xx to a call that carried them only because we asked) is remembered and no longer
asked: its pairs fall back to the text statistics.

Wired for non-streamed calls when `SPECGATE_ASK_LOGPROBS` is on (`gate.gateway.proxy`);
the streaming path and remembering rejecting routes (`RejectingRoutes`) are not wired yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


def wants_logprobs(body: dict[str, Any]) -> bool:
    """Return whether the client itself asked for log-probabilities."""
    value = body.get("logprobs")
    return value is not None and value is not False


def ask(body: dict[str, Any]) -> dict[str, Any]:
    """Return the body asking for the sampled tokens' log-probabilities (no alternatives)."""
    if wants_logprobs(body):
        return body
    chat = isinstance(body.get("messages"), list)
    return {**body, "logprobs": True} if chat else {**body, "logprobs": 0}


def strip_choices(parsed: dict[str, Any]) -> dict[str, Any]:
    """Return a response body or SSE chunk with every choice's `logprobs` set to null."""
    choices = parsed.get("choices")
    if not isinstance(choices, list):
        return parsed
    kept = [{**c, "logprobs": None} if isinstance(c, dict) else c for c in choices]
    return {**parsed, "choices": kept}


def strip_json(content: bytes) -> bytes:
    """Return a non-streamed JSON answer without the log-probabilities we asked for."""
    try:
        parsed = orjson.loads(content)
    except orjson.JSONDecodeError:
        return content
    if not isinstance(parsed, dict):
        return content
    return orjson.dumps(strip_choices(parsed))


@dataclass(frozen=True)
class CallLogprobs:
    """What the collector stores per call: counts and sums, not the arrays."""

    tokens: int  # tokens that carried a log-probability
    total: float  # their sum
    completion_tokens: int | None  # from usage: fewer entries than this means incomplete

    @property
    def mean(self) -> float | None:
        """Return the mean log-probability per token, None without any."""
        return self.total / self.tokens if self.tokens else None

    @property
    def complete(self) -> bool:
        """Return whether every emitted token carried its log-probability."""
        return self.tokens > 0 and self.completion_tokens in (None, self.tokens)


def summarise(parsed: dict[str, Any]) -> CallLogprobs | None:
    """Return the call's log-probability summary; None when the answer carries none."""
    values = [v for c in parsed.get("choices") or () for v in _values(c)]
    usage = parsed.get("usage")
    completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not values:
        return None
    return CallLogprobs(len(values), float(sum(values)), _int(completion))


def _values(choice: Any) -> list[float]:
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    if not isinstance(logprobs, dict):
        return []
    if isinstance(logprobs.get("content"), list):  # chat, and llama.cpp's completions
        raw = [e.get("logprob") for e in logprobs["content"] if isinstance(e, dict)]
    else:  # OpenAI completions columns
        raw = list(logprobs.get("token_logprobs") or ())
    return [float(v) for v in raw if isinstance(v, int | float) and not isinstance(v, bool)]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class RejectingRoutes:
    """Routes that answered a 4xx to a call carrying the `logprobs` we added."""

    def __init__(self) -> None:
        self._routes: set[str] = set()

    def may_ask(self, route: str) -> bool:
        """Return whether `route` may still be asked for log-probabilities."""
        return route not in self._routes

    def observe(self, route: str, status: int, *, we_asked: bool) -> None:
        """Remember `route` when it rejected a call only our `logprobs` made different."""
        if we_asked and 400 <= status < 500:
            self._routes.add(route)
