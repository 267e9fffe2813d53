"""Metric names the project exports (from its registries) and the vLLM names it relies on."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from collectors.metrics import CollectorMetrics
from gate.gateway.metrics import GatewayMetrics

# vLLM 0.33 (shared/FIELD_NOTES.md): the names the scraper reads and dashboards chart.
VLLM_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
    "vllm:request_success",
)
VLLM_HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
)
VLLM_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
}


def _samples(kind: str, name: str) -> set[str]:
    return {name + suffix for suffix in SUFFIXES.get(kind, ("",))}


def project_metrics() -> set[str]:
    """Return every sample name the gateway and collector registries can expose."""
    registry = CollectorRegistry()
    GatewayMetrics(registry)
    CollectorMetrics(registry)
    names: set[str] = set()
    for family in registry.collect():
        names |= _samples(family.type, family.name)
    return names


def vllm_metrics() -> set[str]:
    """Return the vLLM sample names."""
    names: set[str] = set()
    for kind, group in (("counter", VLLM_COUNTERS), ("histogram", VLLM_HISTOGRAMS)):
        for name in group:
            names |= _samples(kind, name) - {name + "_created"}
    return names | set(VLLM_GAUGES)


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
}


def metric_names(expr: str) -> set[str]:
    """Return the metric names a PromQL expression selects."""
    bare = _STRINGS.sub('""', expr)
    bare = _MATCHERS.sub(" ", bare)
    bare = _RANGES.sub(" ", bare)
    bare = _GROUPING.sub(" ", bare)
    bare = re.sub(r"\$\w+|\$\{[^}]*\}", " ", bare)
    return {m for m in _IDENTIFIER.findall(bare) if m.lower() not in _KEYWORDS}
