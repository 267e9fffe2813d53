"""Timing and content of one route call, observed from its JSON response or SSE chunks."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gate.db.enums import GenerationStatus
from gate.gateway.logprobs import Alternatives, choice_values, summarise

# What a failed call says when its answer is JSON, but not shaped like an OpenAI answer.
ODD_SHAPE = "upstream answered in an unexpected shape"


@dataclass
class CallResult:
    """What one route call did: status, timings, usage, speculative counts, output."""

    started_ns: int = field(default_factory=time.time_ns)
    started: float = field(default_factory=time.perf_counter)
    status: GenerationStatus = GenerationStatus.OK
    http_status: int | None = None
    error: str | None = None
    # No connection could be opened (refused or connect timeout): the request never left.
    unreachable: bool = False
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_max_s: float | None = None
    queue_s: float | None = None
    # Timings the engine reported for itself (vLLM's per-request metrics), never mixed with
    # the gateway's own measurements above: a ratio compares like with like.
    engine_ttft_s: float | None = None
    engine_tpot_s: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    content_chunks: int = 0
    # Upstream reads that brought content: an answer that arrived in one read (a burst, such
    # as a tool call the engine held back until complete) has no decode speed to measure.
    content_reads: int = 0
    finish_reason: str | None = None
    response_id: str | None = None
    response_model: str | None = None
    drafts: int | None = None
    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    # The answer's token log-probabilities, summarised (count and sum, never the arrays).
    logprob_tokens: int | None = None
    logprob_sum: float | None = None
    # Choice 0's per-token alternatives, kept until the call's exactness fields are
    # computed (`gate.gateway.fits`); None when the answer carried no log-probabilities.
    alternatives: Alternatives | None = None
    # The route rejected the log-probabilities we asked for; this is the call made again
    # without them.
    logprobs_rejected: bool = False
    text: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    _last_content: float | None = None

    def fail(self, status: GenerationStatus, error: str) -> CallResult:
        """Mark the call failed and stop its clock."""
        self.status = status
        self.error = error[:500]
        self.finish()
        return self

    def finish(self) -> None:
        """Stop the clock."""
        if self.e2e_s is None:
            self.e2e_s = time.perf_counter() - self.started

    def retry_without_logprobs(self) -> None:
        """Start the call again, without the log-probabilities the route rejected; its
        clock runs on from the first try, which the client waited for too."""
        self.status, self.error = GenerationStatus.OK, None
        self.http_status, self.e2e_s = None, None
        self.logprobs_rejected = True

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: (e2e - TTFT) / (output tokens - 1); None
        (undefined) when the content arrived in fewer than two reads."""
        tokens = self.output_tokens or self.content_chunks
        if self.ttft_s is None or self.e2e_s is None or tokens < 2 or self.content_reads < 2:
            return None
        return max(0.0, self.e2e_s - self.ttft_s) / (tokens - 1)

    @property
    def output_text(self) -> str:
        """Return the captured text of the first choice."""
        return "".join(self.text)

    def on_chunks(self, chunks: list[Any], now: float, *, capture: bool) -> None:
        """Account for the chunks of one upstream read, made at `now` (perf_counter);
        entries that are not JSON objects are skipped, one of another shape than OpenAI's
        fails the call (what it answered is forwarded all the same)."""
        try:
            self._account(chunks, now, capture=capture)
        except (AttributeError, TypeError, ValueError):
            # The stream goes on: its clock runs to its end, as for a chunk not JSON.
            self.status, self.error = GenerationStatus.ERROR, ODD_SHAPE

    def _account(self, chunks: list[Any], now: float, *, capture: bool) -> None:
        # Written flat: it runs for every chunk of every streamed call.
        contents = 0
        for chunk in chunks:
            if chunk.__class__ is not dict:
                continue
            for choice in chunk.get("choices") or ():
                finish_reason = choice.get("finish_reason")
                if finish_reason:
                    self.finish_reason = finish_reason
                delta = choice.get("delta")
                if delta.__class__ is dict:
                    content, calls = delta.get("content"), delta.get("tool_calls")
                else:
                    content, calls = choice.get("text"), None
                if content or calls:
                    contents += 1
                    if capture and choice.get("index", 0) == 0:
                        self._capture(content, calls)
                if choice.get("logprobs"):
                    self._add_logprobs(choice_values(choice))
                    self._gather(choice)
            if self.response_id is None:
                self.response_id = chunk.get("id")
            if self.response_model is None:
                self.response_model = chunk.get("model")
            if "usage" in chunk or "metrics" in chunk or "timings" in chunk:
                self._common(chunk)
        if contents:
            self._content_at(now, contents)

    def on_response(self, response: dict[str, Any], *, capture: bool) -> None:
        """Account for a whole (non-streamed) response; one of another shape than OpenAI's
        fails the call (it is forwarded all the same)."""
        try:
            self._account_response(response, capture=capture)
        except (AttributeError, TypeError, ValueError):
            self.fail(GenerationStatus.ERROR, ODD_SHAPE)

    def _account_response(self, response: dict[str, Any], *, capture: bool) -> None:
        for choice in response.get("choices") or ():
            message = choice.get("message") or {}
            if choice.get("index", 0) == 0 and capture:
                content = message.get("content") if message else choice.get("text")
                if content:
                    self.text.append(str(content))
                for i, call in enumerate(message.get("tool_calls") or ()):
                    self.tool_calls[i] = call
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            if choice.get("logprobs"):
                self._gather(choice)
        summary = summarise(response)
        if summary is not None:
            self.logprob_tokens, self.logprob_sum = summary.tokens, summary.total
        self._common(response)

    def _content_at(self, now: float, count: int) -> None:
        self.content_chunks += count
        if now != self._last_content:  # events of one read share its clock reading
            self.content_reads += 1
        if self.ttft_s is None:
            self.ttft_s = now - self.started
        elif self._last_content is not None:
            gap = now - self._last_content
            self.itl_max_s = gap if self.itl_max_s is None else max(self.itl_max_s, gap)
        self._last_content = now

    def _add_logprobs(self, values: list[float]) -> None:
        if values:
            self.logprob_tokens = (self.logprob_tokens or 0) + len(values)
            self.logprob_sum = (self.logprob_sum or 0.0) + sum(values)

    def _gather(self, choice: dict[str, Any]) -> None:
        if self.alternatives is None:
            self.alternatives = Alternatives()
        self.alternatives.add(choice)

    def _capture(self, content: Any, calls: Any) -> None:
        if content:
            self.text.append(str(content))
        for call in calls or ():
            _merge_tool_call(self.tool_calls, call)

    def _common(self, body: dict[str, Any]) -> None:
        self.response_id = self.response_id or body.get("id")
        self.response_model = self.response_model or body.get("model")
        usage = body.get("usage")
        if isinstance(usage, dict):
            self.input_tokens = usage.get("prompt_tokens", self.input_tokens)
            self.output_tokens = usage.get("completion_tokens", self.output_tokens)
        _engine_metrics(self, body)


def _engine_timings(result: CallResult, metrics: dict[str, Any]) -> None:
    """TTFT and TPOT as the engine measured them (`--enable-per-request-metrics`): TPOT is
    (generation time - TTFT) / (output tokens - 1), the gateway's own definition."""
    ttft_ms, total_ms = metrics.get("time_to_first_token_ms"), metrics.get("generation_time_ms")
    if not isinstance(ttft_ms, int | float) or isinstance(ttft_ms, bool):
        return
    result.engine_ttft_s = ttft_ms / 1000.0
    tokens = result.output_tokens
    if isinstance(total_ms, int | float) and isinstance(tokens, int) and tokens > 1:
        result.engine_tpot_s = max(0.0, total_ms - ttft_ms) / 1000.0 / (tokens - 1)


def _merge_tool_call(calls: dict[int, dict[str, Any]], delta: dict[str, Any]) -> None:
    index = int(delta.get("index", 0))
    call = calls.setdefault(index, {"id": None, "type": "function", "function": {}})
    call["id"] = call["id"] or delta.get("id")
    function = delta.get("function") or {}
    if function.get("name"):
        call["function"]["name"] = function["name"]
    if function.get("arguments"):
        call["function"]["arguments"] = (
            call["function"].get("arguments", "") + function["arguments"]
        )


def _engine_metrics(result: CallResult, body: dict[str, Any]) -> None:
    """Read per-request stats: vLLM `metrics` (per-request spec decode and timing metrics)
    and llama.cpp `timings` (draft_n, draft_n_accepted)."""
    metrics = body.get("metrics")
    if isinstance(metrics, dict):
        spec = metrics.get("speculative_decoding")
        if isinstance(spec, dict):
            result.drafts = spec.get("num_spec_steps", result.drafts)
            result.draft_tokens = spec.get("num_draft_tokens", result.draft_tokens)
            result.accepted_tokens = spec.get("num_accepted_draft_tokens", result.accepted_tokens)
        if isinstance(metrics.get("queue_time_ms"), int | float):
            result.queue_s = metrics["queue_time_ms"] / 1000.0
        _engine_timings(result, metrics)
    timings = body.get("timings")
    if isinstance(timings, dict) and "draft_n" in timings:
        result.draft_tokens = timings.get("draft_n")
        result.accepted_tokens = timings.get("draft_n_accepted")
