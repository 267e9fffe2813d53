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
# Suffix of one exposed counter series' cumulative value, under all its labels (`engine`
# included): window deltas are taken per series, then summed, so that one engine restarting
# among several reads as a reset of that engine rather than a bend in the sum.
SERIES = "_series"


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
# Labels that distinguish values worth keeping; the rest (engine, model_name) are summed over.
KEPT_LABELS = frozenset({"position", "finished_reason"})
COUNTERS = frozenset(source.canonical for source in SOURCES.values() if source.kind == "counter")
SERIES_COUNTERS = frozenset(name + SERIES for name in COUNTERS)


@dataclass(slots=True)
class Snapshot:
    """Canonical values of one scrape: counters (cumulative, summed over engines), the same
    counters per exposed series, and gauges."""

    counters: dict[SeriesKey, float] = field(default_factory=dict)
    gauges: dict[SeriesKey, float] = field(default_factory=dict)
    series: dict[SeriesKey, float] = field(default_factory=dict)


def parse(text: str) -> Snapshot:
    """Parse Prometheus exposition text into canonical series, summing over engines."""
    counters: dict[SeriesKey, float] = defaultdict(float)
    series: dict[SeriesKey, float] = defaultdict(float)
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
            key = (source.canonical, kept(tuple(sorted(sample.labels.items()))))
            if source.kind == "counter":
                counters[key] += sample.value
                series[(source.canonical, tuple(sorted(sample.labels.items())))] += sample.value
            else:
                gauges[key].append(sample.value)
                combine[key] = source.combine
    return Snapshot(
        counters=dict(counters),
        gauges={key: _combine(values, combine[key]) for key, values in gauges.items()},
        series=dict(series),
    )


def kept(labels: Labels) -> Labels:
    """Return the labels worth keeping once engines are summed over."""
    return tuple((name, value) for name, value in labels if name in KEPT_LABELS)


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
    """Return increases per exposed series seen in both scrapes, summed over engines."""
    out: dict[SeriesKey, float] = defaultdict(float)
    for (name, labels), value in current.items():
        delta = counter_delta(previous.get((name, labels)), value)
        if delta is not None:
            out[(name, kept(labels))] += delta
    return dict(out)


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
    """Return every value to store for this scrape: cumulative (summed and per series),
    gauges, window deltas and derived values."""
    out = dict(current.counters)
    out.update(current.gauges)
    out.update({(name + SERIES, labels): value for (name, labels), value in current.series.items()})
    if previous is None or not previous.series:
        return out
    window = deltas(previous.series, current.series)
    for key in ((SPEC_DRAFTS, ()), (SPEC_DRAFT_TOKENS, ()), (SPEC_ACCEPTED_TOKENS, ())):
        if key in window:
            out[(key[0] + WINDOW, ())] = window[key]
    out.update(derived(window))
    return out
