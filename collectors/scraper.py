"""Engine `/metrics` text → canonical samples, counter deltas per window, derived spec metrics."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

Kind = Literal["counter", "gauge"]
Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]

# Canonical names shared by every engine (stored in `engine_samples.metric`).
SPEC_DRAFTS = "spec_drafts"
SPEC_DRAFT_TOKENS = "spec_draft_tokens"
SPEC_ACCEPTED_TOKENS = "spec_accepted_tokens"
SPEC_ACCEPTED_PER_POS = "spec_accepted_tokens_per_pos"
SPEC_ACCEPTANCE_RATE = "spec_acceptance_rate"
SPEC_MEAN_ACCEPTANCE_LENGTH = "spec_mean_acceptance_length"
SPEC_ACCEPTANCE_RATE_PER_POS = "spec_acceptance_rate_per_pos"
WINDOW = "_window"  # suffix of values computed over the last scrape interval


@dataclass(frozen=True, slots=True)
class Source:
    """How one exposed metric maps to a canonical one."""

    canonical: str
    kind: Kind
    # Gauges of several engines: "sum" (request counts) or "mean" (fractions, lengths).
    combine: Literal["sum", "mean"] = "sum"


_HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": "ttft_seconds",
    "vllm:request_time_per_output_token_seconds": "tpot_seconds",
    "vllm:inter_token_latency_seconds": "itl_seconds",
    "vllm:e2e_request_latency_seconds": "e2e_seconds",
    "vllm:request_queue_time_seconds": "queue_seconds",
}
# Keyed by sample name with `_total` removed; histograms contribute `_sum` and `_count`.
SOURCES: dict[str, Source] = {
    "vllm:spec_decode_num_drafts": Source(SPEC_DRAFTS, "counter"),
    "vllm:spec_decode_num_draft_tokens": Source(SPEC_DRAFT_TOKENS, "counter"),
    "vllm:spec_decode_num_accepted_tokens": Source(SPEC_ACCEPTED_TOKENS, "counter"),
    "vllm:spec_decode_num_accepted_tokens_per_pos": Source(SPEC_ACCEPTED_PER_POS, "counter"),
    "vllm:request_success": Source("requests_finished", "counter"),
    "vllm:kv_cache_usage_perc": Source("kv_cache_usage", "gauge", "mean"),
    "vllm:num_requests_running": Source("requests_running", "gauge"),
    "vllm:num_requests_waiting": Source("requests_waiting", "gauge"),
    "sglang:spec_accept_length": Source(SPEC_MEAN_ACCEPTANCE_LENGTH, "gauge", "mean"),
    "sglang:spec_accept_rate": Source(SPEC_ACCEPTANCE_RATE, "gauge", "mean"),
    "trtllm_spec_decode_num_draft_tokens": Source(SPEC_DRAFT_TOKENS, "counter"),
    "trtllm_spec_decode_num_accepted_tokens": Source(SPEC_ACCEPTED_TOKENS, "counter"),
    "trtllm_spec_decode_acceptance_length": Source(SPEC_MEAN_ACCEPTANCE_LENGTH, "gauge", "mean"),
    **{
        f"{name}_{part}": Source(f"{canonical}_{part}", "counter")
        for name, canonical in _HISTOGRAMS.items()
        for part in ("sum", "count")
    },
}
# Labels that distinguish series worth keeping; the rest (engine, model_name) are summed over.
KEPT_LABELS = frozenset({"position", "finished_reason"})
COUNTERS = frozenset(source.canonical for source in SOURCES.values() if source.kind == "counter")


@dataclass(slots=True)
class Snapshot:
    """Canonical values of one scrape: counters (cumulative) and gauges."""

    counters: dict[SeriesKey, float] = field(default_factory=dict)
    gauges: dict[SeriesKey, float] = field(default_factory=dict)


def parse(text: str) -> Snapshot:
    """Parse Prometheus exposition text into canonical series, summing over engines."""
    counters: dict[SeriesKey, float] = defaultdict(float)
    gauges: dict[SeriesKey, list[float]] = defaultdict(list)
    combine: dict[SeriesKey, str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name.endswith("_created"):
                continue  # prometheus_client's creation timestamps, not values
            source = SOURCES.get(name.removesuffix("_total"))
            if source is None:
                continue
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k in KEPT_LABELS))
            key = (source.canonical, labels)
            if source.kind == "counter":
                counters[key] += sample.value
            else:
                gauges[key].append(sample.value)
                combine[key] = source.combine
    return Snapshot(
        counters=dict(counters),
        gauges={key: _combine(values, combine[key]) for key, values in gauges.items()},
    )


def _combine(values: list[float], how: str) -> float:
    return sum(values) / len(values) if how == "mean" else sum(values)


def counter_delta(previous: float | None, current: float) -> float | None:
    """Return the increase over a window; a counter that went down restarted from zero."""
    if previous is None:
        return None
    return current if current < previous else current - previous


def deltas(
    previous: Mapping[SeriesKey, float], current: Mapping[SeriesKey, float]
) -> dict[SeriesKey, float]:
    """Return per-series increases for series seen in both scrapes."""
    out: dict[SeriesKey, float] = {}
    for key, value in current.items():
        delta = counter_delta(previous.get(key), value)
        if delta is not None:
            out[key] = delta
    return out


def derived(window: Mapping[SeriesKey, float]) -> dict[SeriesKey, float]:
    """Return acceptance rate, mean acceptance length, per-position rates and latency means."""
    # acceptance rate = accepted / draft tokens; mean acceptance length = 1 + accepted / drafts
    # (vLLM does not count the bonus token as accepted); per position = accepted there / drafts.
    drafts = window.get((SPEC_DRAFTS, ()))
    draft_tokens = window.get((SPEC_DRAFT_TOKENS, ()))
    accepted = window.get((SPEC_ACCEPTED_TOKENS, ()))
    out: dict[SeriesKey, float] = {}
    if accepted is not None and draft_tokens:
        out[(SPEC_ACCEPTANCE_RATE + WINDOW, ())] = accepted / draft_tokens
    if accepted is not None and drafts:
        out[(SPEC_MEAN_ACCEPTANCE_LENGTH + WINDOW, ())] = 1 + accepted / drafts
    for (name, labels), value in window.items():
        if name == SPEC_ACCEPTED_PER_POS and drafts:
            out[(SPEC_ACCEPTANCE_RATE_PER_POS + WINDOW, labels)] = value / drafts
    for canonical in _HISTOGRAMS.values():
        count = window.get((f"{canonical}_count", ()))
        total = window.get((f"{canonical}_sum", ()))
        if count and total is not None:
            out[(f"{canonical}_mean{WINDOW}", ())] = total / count
    return out


def window_samples(previous: Snapshot | None, current: Snapshot) -> dict[SeriesKey, float]:
    """Return every value to store for this scrape: cumulative, gauges, window deltas, derived."""
    out = dict(current.counters)
    out.update(current.gauges)
    if previous is None:
        return out
    window = deltas(previous.counters, current.counters)
    for key in ((SPEC_DRAFTS, ()), (SPEC_DRAFT_TOKENS, ()), (SPEC_ACCEPTED_TOKENS, ())):
        if key in window:
            out[(key[0] + WINDOW, ())] = window[key]
    out.update(derived(window))
    return out
