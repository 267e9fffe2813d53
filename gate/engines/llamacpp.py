"""The llama.cpp backend through `xllamacpp`: plain decoding or `ngram_simple` speculation.

Pinned to xllamacpp 2026.10.11549, whose settings differ from its README: speculation is
`params.speculative.types = [NGRAM_SIMPLE]` with `ngram_simple.size_n` (the lookup n-gram)
and `size_m` (the draft length). `ngram_simple` has one n, so `prompt_lookup_max` sets it
and `prompt_lookup_min` has no llama.cpp counterpart.

With one slot (`parallel=1`, the default), per-request steps and per-position acceptance
come from llama.cpp's own counters, read before and after each request: requests run one at
a time, so the difference is the request's own. With several slots (`n_parallel`, requests
decoded in one batch) the counters mix requests, so drafted and accepted tokens come from
the request's own `timings`; its steps are estimated as drafted / k and per-position counts
are not known.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gate.engines.base import CacheUse, Emit, GenerationResult, GenRequest
from gate.engines.model import LLAMACPP_INSTALL, require
from gate.engines.spec import NgramConfig, SpecStats
from gate.errors import GateError

_PREFIX = "llamacpp:spec_decode_"


class LlamaCppBackend:
    """SmolLM2 on llama.cpp, in this process (one server per process: they slow each other)."""

    name = "llamacpp"

    def __init__(
        self,
        gguf: Path,
        *,
        spec: NgramConfig | None,
        threads: int = 1,
        ctx_size: int = 4096,
        parallel: int = 1,
    ) -> None:
        xllamacpp = require("xllamacpp", LLAMACPP_INSTALL)
        self.spec = spec
        self.slots = parallel
        self.cache = CacheUse(ctx_size * parallel)
        params = xllamacpp.CommonParams()
        params.model.path = str(gguf)
        params.n_ctx = ctx_size * parallel  # llama.cpp splits the context across its slots
        params.n_parallel = parallel
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
        params.endpoint_metrics = True
        params.verbosity = -1  # llama.cpp logs every request at its default level
        if spec is not None:
            kinds = xllamacpp.common_speculative_type
            params.speculative.types = [kinds.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
            params.speculative.ngram_simple.size_n = spec.prompt_lookup_max
            params.speculative.ngram_simple.size_m = spec.num_speculative_tokens
        self._server = xllamacpp.Server(params)

    def generate(self, request: GenRequest, emit: Emit) -> GenerationResult:
        """Stream one request through llama.cpp, forwarding its deltas."""
        counted = self.spec is not None and self.slots == 1
        before = self._counters() if counted else {}
        state = _StreamState(emit, top=request.top_logprobs if request.logprobs else None)
        state.held = lambda positions: self.cache.hold(id(state), positions)
        body = _body(request)
        handle = (
            self._server.handle_chat_completions
            if request.chat
            else self._server.handle_completions
        )
        try:
            result = handle(body, state.on_chunk)
        finally:
            self.cache.release(id(state))
        if isinstance(result, dict) and "error" in result:
            raise GateError(str(result["error"].get("message", result["error"])), status_code=400)
        if state.error is not None:
            raise GateError(state.error, status_code=400)
        outcome = state.outcome()
        if counted:
            outcome.spec = self._spec_stats(before, state.drafted)
        elif self.spec is not None:
            outcome.spec = _timed_stats(self.spec.num_speculative_tokens, state)
        return outcome

    def _counters(self) -> dict[tuple[str, str], float]:
        values: dict[tuple[str, str], float] = {}
        for family in text_string_to_metric_families(self._server.handle_metrics()):
            for sample in family.samples:
                if sample.name.startswith(_PREFIX):
                    name = sample.name.removeprefix(_PREFIX).removesuffix("_total")
                    values[(name, sample.labels.get("position", ""))] = sample.value
        return values

    def _spec_stats(self, before: dict[tuple[str, str], float], drafted: int) -> SpecStats:
        """Return the request's counter deltas; wait briefly if llama.cpp lags the response."""
        assert self.spec is not None
        k = self.spec.num_speculative_tokens
        delta: dict[tuple[str, str], float] = {}
        for _ in range(50):
            after = self._counters()
            delta = {key: after[key] - before.get(key, 0.0) for key in after}
            if delta.get(("num_draft_tokens", ""), 0.0) >= drafted:
                break
            time.sleep(0.002)
        return SpecStats.from_counters(
            k,
            steps=int(delta.get(("num_drafts", ""), 0)),
            drafted=int(delta.get(("num_draft_tokens", ""), 0)),
            accepted=int(delta.get(("num_accepted_tokens", ""), 0)),
            per_pos=[int(delta.get(("num_accepted_tokens_per_pos", str(p)), 0)) for p in range(k)],
        )


class _StreamState:
    """Collects one llama.cpp stream: deltas out to `emit`, usage and timings kept."""

    def __init__(self, emit: Emit, *, top: int | None = None) -> None:
        self.emit = emit
        # llama.cpp's entries in OpenAI chat form (with its token `id`), also for completions.
        self.logprobs: list[dict[str, Any]] | None = None if top is None else []
        self.top = top or 0
        self.text: list[str] = []
        self.finish_reason = "stop"
        self.usage: dict[str, int] = {}
        self.drafted = 0
        self.accepted = 0
        self.cancelled = False
        self.error: str | None = None
        self.held: Callable[[int], None] = lambda _positions: None

    def on_chunk(self, chunk: Any) -> bool:
        """Handle one chunk; return True to make llama.cpp stop."""
        if isinstance(chunk, str):
            chunk = json.loads(chunk)
        if "error" in chunk:
            self.error = str(chunk["error"].get("message", chunk["error"]))
            return True
        for choice in chunk.get("choices") or ():
            self._choice(choice)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        timings = chunk.get("timings")
        if isinstance(timings, dict):
            self.drafted = int(timings.get("draft_n", 0))
            self.accepted = int(timings.get("draft_n_accepted", 0))
            # The slot's sequence: prompt (cached and evaluated) and the tokens so far.
            self.held(sum(int(timings.get(k, 0)) for k in ("cache_n", "prompt_n", "predicted_n")))
        return self.cancelled

    def _choice(self, choice: dict[str, Any]) -> None:
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        given = choice.get("delta")
        content = given.get("content") if isinstance(given, dict) else choice.get("text")
        entries = (choice.get("logprobs") or {}).get("content") or []
        delta: dict[str, Any] = {"content": content or ""}
        if self.logprobs is not None and entries:
            entries = [_top(entry, self.top) for entry in entries]
            self.logprobs.extend(entries)
            delta["logprobs"] = entries
        if content or "logprobs" in delta:
            self.text.append(content or "")
            self.cancelled = not self.emit(delta) or self.cancelled

    def outcome(self) -> GenerationResult:
        """Return how the generation ended."""
        return GenerationResult(
            text="".join(self.text),
            finish_reason="abort" if self.cancelled else self.finish_reason,
            prompt_tokens=int(self.usage.get("prompt_tokens", 0)),
            completion_tokens=int(self.usage.get("completion_tokens", 0)),
            logprobs=self.logprobs,
        )


def _timed_stats(k: int, state: _StreamState) -> SpecStats:
    """Return the request's own drafted and accepted tokens (from its `timings`)."""
    steps = -(-state.drafted // k)  # each step drafts at most k tokens
    return SpecStats(k, steps, state.drafted, min(state.accepted, state.drafted))


def _top(entry: dict[str, Any], top: int) -> dict[str, Any]:
    return {**entry, "top_logprobs": (entry.get("top_logprobs") or [])[:top]}


def _body(request: GenRequest) -> dict[str, Any]:
    """Return llama.cpp's request body: streamed, with usage, and no prompt cache reuse."""
    body: dict[str, Any] = {
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "stream": True,
        "stream_options": {"include_usage": True},
        # Timings on every chunk, not only the last: the KV-cache gauge follows them.
        "timings_per_token": True,
        # Reusing a cached prefix changes the prefill's batch shapes, hence numerics: two
        # identical greedy requests must decode alike.
        "cache_prompt": False,
    }
    if request.chat:
        body["messages"] = request.messages
    else:
        body["prompt"] = request.prompt
    if request.seed is not None:
        body["seed"] = request.seed
    if request.stop:
        body["stop"] = list(request.stop)
    if request.logprobs:
        # llama.cpp returns no log-probabilities at all when asked for zero alternatives.
        body["logprobs"] = True if request.chat else max(1, request.top_logprobs)
        if request.chat:
            body["top_logprobs"] = max(1, request.top_logprobs)
    if request.response_format is not None:
        body["response_format"] = request.response_format
    return body
