"""vLLM's Prometheus metric names, labels and buckets for the local engines.

Checked against vLLM's source (`vllm/v1/metrics/loggers.py`, `vllm/v1/spec_decode/metrics.py`):
counters are registered without `_total` (prometheus_client appends it), every series has
`model_name` and `engine` (the engine index, "0" for one engine), spec-decode counters exist
only when speculation is configured, and per-position counters are created up front for
positions 0..k-1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gate.engines.base import FINISH_REASONS
from gate.engines.spec import SpecStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# vLLM's buckets, so histogram quantiles read the same as a real vLLM's.
# fmt: off
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
# fmt: on
LABELS = ["model_name", "engine"]


@dataclass(frozen=True)
class Finished:
    """What one finished request contributes to the metrics."""

    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    e2e_s: float
    queue_s: float
    ttft_s: float | None = None
    spec: SpecStats | None = None

    @property
    def tpot_s(self) -> float | None:
        """Return (e2e - TTFT) / (output tokens - 1), vLLM's time per output token."""
        if self.ttft_s is None or self.completion_tokens < 2:
            return None
        return max(0.0, self.e2e_s - self.ttft_s) / (self.completion_tokens - 1)


class EngineMetrics:
    """One engine's registry: request latencies, outcomes and speculative counters."""

    def __init__(
        self,
        model_name: str,
        *,
        spec_tokens: int = 0,
        backend: str = "",
        cache_usage: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.registry = CollectorRegistry()
        self.spec_tokens = spec_tokens
        labels = (model_name, "0")
        reg = self.registry

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, LABELS, registry=reg, buckets=buckets).labels(*labels)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=reg).labels(*labels)

        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS
        )
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Time per output token per request.",
            TPOT_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "End-to-end request latency.", LATENCY_BUCKETS
        )
        self.queue = histogram(
            "vllm:request_queue_time_seconds", "Time waiting for the engine.", LATENCY_BUCKETS
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Generation tokens processed.")
        success = Counter(
            "vllm:request_success", "Finished requests.", [*LABELS, "finished_reason"], registry=reg
        )
        self.success = {r: success.labels(*labels, r) for r in FINISH_REASONS}
        gauge = Gauge("vllm:num_requests_running", "Requests running.", LABELS, registry=reg)
        self.running = gauge.labels(*labels)
        gauge = Gauge("vllm:num_requests_waiting", "Requests waiting.", LABELS, registry=reg)
        self.waiting = gauge.labels(*labels)
        # Read at each scrape: the share of the engine's KV-cache positions that running
        # requests hold (`gate.engines.base.CacheUse`), 0 to 1 as vLLM's.
        gauge = Gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage: the share of cache positions running requests hold (1: full).",
            LABELS,
            registry=reg,
        )
        gauge.labels(*labels).set_function(cache_usage)
        info = Gauge(
            "specgate_engine_info",
            "The local engine's backend and speculation.",
            [*LABELS, "backend", "speculative"],
            registry=reg,
        )
        info.labels(*labels, backend or "none", "ngram" if spec_tokens else "none").set(1)
        if spec_tokens:
            self._spec_counters(labels)

    def _spec_counters(self, labels: tuple[str, str]) -> None:
        reg = self.registry
        self.drafts = Counter(
            "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", LABELS, registry=reg
        ).labels(*labels)
        self.draft_tokens = Counter(
            "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", LABELS, registry=reg
        ).labels(*labels)
        self.accepted = Counter(
            "vllm:spec_decode_num_accepted_tokens",
            "Number of accepted tokens.",
            LABELS,
            registry=reg,
        ).labels(*labels)
        per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            [*LABELS, "position"],
            registry=reg,
        )
        self.per_pos = [per_pos.labels(*labels, str(p)) for p in range(self.spec_tokens)]

    def observe(self, done: Finished) -> None:
        """Record one finished request."""
        self.e2e.observe(done.e2e_s)
        self.queue.observe(done.queue_s)
        if done.ttft_s is not None:
            self.ttft.observe(done.ttft_s)
        if done.tpot_s is not None:
            self.tpot.observe(done.tpot_s)
        self.prompt_tokens.inc(done.prompt_tokens)
        self.generation_tokens.inc(done.completion_tokens)
        reason = "stop" if done.finish_reason == "tool_calls" else done.finish_reason
        self.success.get(reason, self.success["error"]).inc()
        if done.spec is not None and self.spec_tokens:
            self._observe_spec(done.spec)

    def _observe_spec(self, spec: SpecStats) -> None:
        self.drafts.inc(spec.num_spec_steps)
        self.draft_tokens.inc(spec.num_draft_tokens)
        self.accepted.inc(spec.num_accepted_draft_tokens)
        for counter, count in zip(self.per_pos, spec.accepted_per_pos, strict=False):
            counter.inc(count)

    def render(self) -> bytes:
        """Return the Prometheus text exposition."""
        return generate_latest(self.registry)
