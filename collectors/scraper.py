"""Engine `/metrics` text → canonical samples, counter deltas per window, derived spec metrics."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain
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
# Suffix of a family's creation timestamp per exposed series (prometheus_client's
# `_created`): a new one means the engine restarted, even if every value rose since.
CREATED = "_created"


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
# Families that expose `_created`, by exposed name (counters without `_total`): their
# canonical names, a histogram's without its `_sum` / `_count` part.
_FAMILIES = {
    **{
        name: source.canonical
        for name, source in SOURCES.items()
        if source.kind == "counter" and name.rsplit("_", 1)[0] not in _HISTOGRAMS
    },
    **_HISTOGRAMS,
}
CREATED_METRICS = frozenset(name + CREATED for name in _FAMILIES.values())


@dataclass(slots=True)
class Snapshot:
    """Canonical values of one scrape: counters (cumulative, summed over engines), the same
    counters per exposed series, gauges, and families' creation times per exposed series."""

    counters: dict[SeriesKey, float] = field(default_factory=dict)
    gauges: dict[SeriesKey, float] = field(default_factory=dict)
    series: dict[SeriesKey, float] = field(default_factory=dict)
    created: dict[SeriesKey, float] = field(default_factory=dict)


def parse(text: str) -> Snapshot:
    """Parse Prometheus exposition text into canonical series, summing over engines."""
    counters: dict[SeriesKey, float] = defaultdict(float)
    series: dict[SeriesKey, float] = defaultdict(float)
    gauges: dict[SeriesKey, list[float]] = defaultdict(list)
    combine: dict[SeriesKey, str] = {}
    created: dict[SeriesKey, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name.endswith(CREATED):
                # prometheus_client's creation timestamps: when a series began, not values.
                canonical = _FAMILIES.get(name.removesuffix(CREATED))
                if canonical is not None:
                    created[(canonical, tuple(sorted(sample.labels.items())))] = sample.value
                continue
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
        created=created,
    )


def kept(labels: Labels) -> Labels:
    """Return the labels worth keeping once engines are summed over."""
    return tuple((name, value) for name, value in labels if name in KEPT_LABELS)


def _combine(values: list[float], how: str) -> float:
    return sum(values) / len(values) if how == "mean" else sum(values)


def engine_of(labels: Labels) -> Labels:
    """Return the labels naming the engine that exposes a series (`engine`, `model_name`)."""
    return tuple((name, value) for name, value in labels if name not in KEPT_LABELS)


def restarted(previous: Snapshot, current: Snapshot) -> set[Labels]:
    """Return the engines that restarted between two scrapes: a counter of theirs went
    down, or a series of theirs has a new creation time."""
    went_down = (
        key for key, value in current.series.items() if value < previous.series.get(key, value)
    )
    recreated = (
        key for key, stamp in current.created.items() if stamp != previous.created.get(key, stamp)
    )
    return {engine_of(labels) for _, labels in chain(went_down, recreated)}


def deltas(previous: Snapshot, current: Snapshot) -> dict[SeriesKey, float]:
    """Return increases per exposed series, summed over engines."""
    # A restart is the engine's, not one series': a histogram's `_count` can fall while its
    # `_sum` rises, and a mean of the one's increase over the other's would be neither
    # window's. Every series of a restarted engine begins again from zero.
    fresh = restarted(previous, current)
    out: dict[SeriesKey, float] = defaultdict(float)
    for (name, labels), value in current.series.items():
        before = previous.series.get((name, labels))
        if engine_of(labels) in fresh:
            out[(name, kept(labels))] += value
        elif before is not None:
            out[(name, kept(labels))] += value - before
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
    gauges, creation times, window deltas and derived values."""
    out = dict(current.counters)
    out.update(current.gauges)
    out.update({(name + SERIES, labels): value for (name, labels), value in current.series.items()})
    out.update(
        {(name + CREATED, labels): stamp for (name, labels), stamp in current.created.items()}
    )
    if previous is None or not previous.series:
        return out
    window = deltas(previous, current)
    for key in ((SPEC_DRAFTS, ()), (SPEC_DRAFT_TOKENS, ()), (SPEC_ACCEPTED_TOKENS, ())):
        if key in window:
            out[(key[0] + WINDOW, ())] = window[key]
    out.update(derived(window))
    return out
