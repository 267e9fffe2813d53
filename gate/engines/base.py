"""What every local backend takes and returns: a parsed request in, deltas and an outcome out."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gate.engines.spec import NgramConfig, SpecStats
from gate.errors import BadRequest

# A streamed delta ({"content": str} or {"tool_calls": [...]}); False means the client left.
Emit = Callable[[dict[str, Any]], bool]
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


@dataclass(frozen=True)
class GenRequest:
    """The generation settings of one OpenAI request, validated."""

    chat: bool
    messages: list[dict[str, Any]]
    prompt: str
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str = "auto"  # "auto", "required" (a named function counts as required)
    logprobs: bool = False  # return each token's log-probability (OpenAI `logprobs`)
    top_logprobs: int = 0  # with the most likely alternatives at each position (0-20)

    @property
    def greedy(self) -> bool:
        """Return whether decoding is argmax (temperature 0)."""
        return self.temperature <= 0.0


@dataclass
class GenerationResult:
    """How one generation ended, with what the usage and metrics blocks need."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    spec: SpecStats | None = None
    # OpenAI chat `logprobs.content` entries, when the request asked for them.
    logprobs: list[dict[str, Any]] | None = None


class CacheUse:
    """The KV-cache positions the running requests hold, out of the engine's capacity.

    vLLM's `vllm:kv_cache_usage_perc` is the share of its KV-cache blocks in use, 0 to 1.
    The local engines have no paged blocks: their capacity is their context (`slots` times
    the context of one slot), and a running request holds its prompt plus the tokens it
    has generated so far (as of its latest delta). A finished request holds nothing: its
    slot is reused, as vLLM counts a finished request's cached blocks as free.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._held: dict[int, int] = {}
        self._lock = threading.Lock()  # requests decode in worker threads

    def hold(self, request: int, positions: int) -> None:
        """Record that request `request` (any unique key) now holds `positions`."""
        with self._lock:
            self._held[request] = positions

    def release(self, request: int) -> None:
        """Free what request `request` held."""
        with self._lock:
            self._held.pop(request, None)

    def share(self) -> float:
        """Return the share of the capacity held now, 0 to 1."""
        with self._lock:
            return min(1.0, sum(self._held.values()) / self.capacity)


class Backend(Protocol):
    """A model that generates for `slots` requests at a time (each call blocks its thread)."""

    name: str
    spec: NgramConfig | None
    slots: int
    cache: CacheUse  # kept by `generate` as it decodes

    def generate(self, request: GenRequest, emit: Emit) -> GenerationResult:
        """Generate, calling `emit` with each delta; stop early when it returns False."""
        ...


def parse_request(body: dict[str, Any], *, chat: bool, default_max_tokens: int) -> GenRequest:
    """Validate an OpenAI chat or text completion body; BadRequest says what is wrong."""
    messages = body.get("messages")
    prompt = body.get("prompt", "")
    if chat and (not isinstance(messages, list) or not messages):
        raise BadRequest("'messages' must be a non-empty list")
    if not chat and not isinstance(prompt, str):
        raise BadRequest("'prompt' must be a string (token lists and batches are not supported)")
    if body.get("n", 1) != 1:
        raise BadRequest("only n=1 is supported")
    _refuse_unsupported(body)
    options = body.get("stream_options")
    return GenRequest(
        chat=chat,
        messages=[_message(m) for m in messages] if chat and isinstance(messages, list) else [],
        prompt=prompt if isinstance(prompt, str) else "",
        max_tokens=_max_tokens(body, default_max_tokens),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 1e-6, 1.0),
        seed=_seed(body.get("seed")),
        stop=_stop(body.get("stop")),
        stream=bool(body.get("stream")),
        include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
        response_format=_object(body, "response_format"),
        tools=_tools(body.get("tools")) if body.get("tool_choice") != "none" else None,
        tool_choice="auto" if body.get("tool_choice") in (None, "auto", "none") else "required",
        **_logprobs(body, chat=chat),
    )


# Sampling settings these engines do not implement, with the value that leaves sampling
# alone: a request that needs any other is refused, never sampled without it (a caller
# would read the answer, and its logprobs, as drawn under settings that were ignored).
_NEUTRAL: dict[str, tuple[object, ...]] = {
    "top_k": (None, 0, -1),
    "min_p": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "logit_bias": (None, {}),
}


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name, neutral in _NEUTRAL.items():
        value = body.get(name)
        if isinstance(value, bool) or value not in neutral:
            raise BadRequest(f"'{name}' is not supported by this engine (only {neutral[1]!r})")


def _logprobs(body: dict[str, Any], *, chat: bool) -> dict[str, Any]:
    """Chat: `logprobs` true and `top_logprobs` 0-20; completions: `logprobs` 0-20 (the top n).

    OpenAI caps completions at 5; 20 is vLLM's default `max_logprobs` for both.
    """
    value = body.get("logprobs")
    if value is None or value is False:
        return {}
    if chat:
        if value is not True:
            raise BadRequest("'logprobs' must be a boolean")
        top = body.get("top_logprobs") or 0
        if not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= 20:
            raise BadRequest("'top_logprobs' must be an integer in [0, 20]")
        return {"logprobs": True, "top_logprobs": top}
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 20:
        raise BadRequest("'logprobs' must be an integer in [0, 20]")
    return {"logprobs": True, "top_logprobs": value}


def _message(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or not isinstance(raw.get("role"), str):
        raise BadRequest("each message must be an object with a 'role'")
    content = raw.get("content")
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return {**raw, "content": content if isinstance(content, str) else ""}


def _max_tokens(body: dict[str, Any], default: int) -> int:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest("'max_tokens' must be a positive integer")
    return value


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise BadRequest(f"'{key}' must be a number in [{low:g}, {high:g}]")
    return float(value)


def _seed(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest("'seed' must be an integer")
    return value % 2**32


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise BadRequest("'stop' must be a string or a list of non-empty strings")
    return tuple(value[:4])


def _object(body: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = body.get(key)
    if value is not None and not isinstance(value, dict):
        raise BadRequest(f"'{key}' must be an object")
    return value


def _tools(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise BadRequest("'tools' must be a list of objects")
    return value or None
