"""Prometheus metrics of the gateway (multiprocess-safe when PROMETHEUS_MULTIPROC_DIR is set)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gate.gateway.observe import CallResult
from gate.telemetry import prometheus

LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.5)


class GatewayMetrics:
    """The gateway's metric families, registered on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "specgate_gateway_route_calls",
            "Route calls by route, cohort and status.",
            ["route", "cohort", "status"],
            registry=r,
        )
        self.ttft = Histogram(
            "specgate_gateway_ttft_seconds",
            "Time to first content chunk per route call.",
            ["route", "cohort"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            "specgate_gateway_tpot_seconds",
            "Time per output token after the first.",
            ["route", "cohort"],
            buckets=TPOT_BUCKETS,
            registry=r,
        )
        self.mirror_inflight = Gauge(
            "specgate_gateway_mirror_inflight",
            "Mirror and control calls queued or running.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.mirror_queue_wait = Histogram(
            "specgate_gateway_mirror_queue_wait_seconds",
            "Time a started mirror or control call waited in the gateway's queue.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.exactness_skipped = Counter(
            "specgate_gateway_exactness_skipped",
            "Route calls whose answer carried top_logprobs but whose span ended without"
            " exactness fields: too many calls were waiting for theirs.",
            registry=r,
        )
        self.mirror_dropped = Counter(
            "specgate_gateway_mirror_dropped",
            "Mirror calls never made: the pool was full, they could not start in time,"
            " or the rollout stopped mirroring (a candidate's skipped as down are not counted"
            " here: see route_calls).",
            ["rollout"],
            registry=r,
        )
        self.killed = Gauge(
            "specgate_gateway_rollout_killed",
            "1 when a rollout is killed (baseline only).",
            ["rollout", "alias"],
            registry=r,
            multiprocess_mode="max",
        )
        self.killed_at = Gauge(
            "specgate_gateway_rollout_killed_at_seconds",
            "Unix time the rollout was killed (0 when not killed).",
            ["rollout", "alias"],
            registry=r,
            multiprocess_mode="max",
        )
        self.verdict_at = Gauge(
            "specgate_gateway_rollout_verdict_at_seconds",
            "Unix time of a running rollout's newest verdict (its start before the first).",
            ["rollout", "alias"],
            registry=r,
            multiprocess_mode="max",
        )
        self.stale = Gauge(
            "specgate_gateway_routing_stale",
            "1 when routing state is stale (baseline only).",
            registry=r,
            multiprocess_mode="max",
        )
        self.route_down = Gauge(
            "specgate_gateway_route_down",
            "1 while a route refuses connections (a candidate is skipped until a probe connects).",
            ["route"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.pubsub = Gauge(
            "specgate_gateway_pubsub_connected",
            "1 while routing changes can be pushed over Redis (0: polling only).",
            registry=r,
            multiprocess_mode="min",
        )
        self.routed = Counter(
            "specgate_gateway_routed_by_load",
            "Requests of a promoted rollout routed by load, by why they went where they went"
            " (below_crossover: the candidate; the rest: the baseline).",
            ["rollout", "reason"],
            registry=r,
        )
        self.crossover = Gauge(
            "specgate_gateway_crossover_running_requests",
            "A rollout routed by load: the candidate's running requests below which its"
            " segment's requests go to the candidate (0: none; absent: no crossover).",
            ["rollout", "alias", "route", "segment", "source"],
            registry=r,
            multiprocess_mode="max",
        )
        self.crossover_age = Gauge(
            "specgate_gateway_crossover_measured_at_seconds",
            "Unix time the crossover a rollout routes by was measured.",
            ["rollout", "alias", "source"],
            registry=r,
            multiprocess_mode="max",
        )

        # Labelled children, looked up once per label set (labels() costs per call).
        self._calls: dict[tuple[str, str, str], Any] = {}
        self._latency: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._routed: dict[tuple[int, str], Any] = {}

    def routed_by_load(self, rollout_id: int, reason: str) -> None:
        """Count one request routed by load."""
        child = self._routed.get((rollout_id, reason))
        if child is None:
            child = self._routed[(rollout_id, reason)] = self.routed.labels(str(rollout_id), reason)
        child.inc()

    def observe(self, route: str, cohort: str, result: CallResult, *, status: str) -> None:
        """Count one finished route call."""
        calls = self._calls.get((route, cohort, status))
        if calls is None:
            calls = self._calls[(route, cohort, status)] = self.requests.labels(
                route, cohort, status
            )
        calls.inc()
        latency = self._latency.get((route, cohort))
        if latency is None:
            latency = self._latency[(route, cohort)] = (
                self.ttft.labels(route, cohort),
                self.tpot.labels(route, cohort),
            )
        if result.ttft_s is not None:
            latency[0].observe(result.ttft_s)
        tpot = result.tpot_s
        if tpot is not None:
            latency[1].observe(tpot)

    def set_route_down(self, route: str, down: bool) -> None:
        """Record a route going down or coming back."""
        self.route_down.labels(route).set(1 if down else 0)


def exposition(metrics: GatewayMetrics) -> tuple[bytes, str]:
    """Render metrics; in multiprocess mode, aggregate every worker's files."""
    return prometheus.exposition(metrics.registry)
