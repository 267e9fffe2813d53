"""What got worse and what got better: rules over one rollout's week and the week before.

Latency compares the candidate's quantiles with the baseline's of the same week: a finding
needs the ratio beyond 1 ± 5% and the two quantiles' distribution-free intervals apart, so
p99 noise on small samples is not reported; last week's ratio is quoted beside it.
Acceptance compares the candidate with itself a week earlier. Quality and failures compare
the arms with 95% intervals, so a finding needs the interval clear of zero.
"""

from __future__ import annotations

from gate.reports.intervals import newcombe, wilson
from gate.reports.model import Distribution, Finding, RolloutStats, RolloutWeek

# A latency ratio beyond 1 ± this is reported (5%).
LATENCY_TOLERANCE = 0.05
# An acceptance rate moving more than this (absolute) week over week is reported.
ACCEPTANCE_CHANGE = 0.05
# Fewer successful calls per arm than this: no latency finding.
MIN_CALLS = 20
_QUANTILES = (("p50", 0.5), ("p99", 0.99))


def compare(weeks: list[RolloutWeek], *, previous: str) -> tuple[list[Finding], list[Finding]]:
    """Return (regressions, improvements) over every rollout's week."""
    worse: list[Finding] = []
    better: list[Finding] = []
    for week in weeks:
        for finding, harmful in _all(week, previous):
            (worse if harmful else better).append(finding)
    return worse, better


def _all(week: RolloutWeek, previous: str) -> list[tuple[Finding, bool]]:
    return [
        *_latency(week, previous),
        *_acceptance(week, previous),
        *_quality(week),
        *_failures(week),
    ]


def _arms(stats: RolloutStats, metric: str) -> tuple[Distribution, Distribution] | None:
    arms: dict[str, Distribution] = getattr(stats, metric)
    base, cand = arms.get("baseline"), arms.get("candidate")
    if base is None or cand is None or min(base.n, cand.n) < MIN_CALLS:
        return None
    return base, cand


def _ratio(stats: RolloutStats, metric: str, p: float) -> float | None:
    arms = _arms(stats, metric)
    if arms is None or arms[0].at(p) <= 0:
        return None
    return arms[1].at(p) / arms[0].at(p)


def _separated(base: Distribution, cand: Distribution, p: float, slower: bool) -> bool:
    (b_low, b_high), (c_low, c_high) = base.interval(p), cand.interval(p)
    return c_low > b_high if slower else c_high < b_low


def _latency(week: RolloutWeek, previous: str) -> list[tuple[Finding, bool]]:
    found = []
    for metric in ("ttft", "tpot"):
        arms = _arms(week.current, metric)
        for label, p in _QUANTILES:
            ratio = _ratio(week.current, metric, p)
            if arms is None or ratio is None or abs(ratio - 1) <= LATENCY_TOLERANCE:
                continue
            slower = ratio > 1
            if not _separated(*arms, p, slower):
                continue
            before = _ratio(week.previous, metric, p)
            was = f" (ratio {before:.2f} in {previous})" if before is not None else ""
            word = "slower" if slower else "faster"
            text = f"candidate {metric.upper()} {label} {abs(ratio - 1):.0%} {word} than baseline"
            finding = Finding(week.name, f"{metric}_{label}_ratio", text + was, ratio, before)
            found.append((finding, slower))
    return found


def _acceptance(week: RolloutWeek, previous: str) -> list[tuple[Finding, bool]]:
    found = []
    for segment, now in week.current.acceptance.items():
        then = week.previous.acceptance.get(segment)
        if now.rate is None or then is None or then.rate is None:
            continue
        change = now.rate - then.rate
        if abs(change) > ACCEPTANCE_CHANGE:
            text = (
                f"acceptance in segment {segment} {then.rate:.1%} in {previous} -> {now.rate:.1%}"
            )
            finding = Finding(week.name, f"acceptance:{segment}", text, now.rate, then.rate)
            found.append((finding, change < 0))
    return found


def _quality(week: RolloutWeek) -> list[tuple[Finding, bool]]:
    found = []
    for q in week.current.quality:
        d = q.delta
        if d is None or (d.low <= 0 <= d.high):
            continue
        text = (
            f"{q.evaluator} pass rate {d.estimate * 100:+.1f} pts vs baseline "
            f"(95% CI {d.low * 100:+.1f} to {d.high * 100:+.1f})"
        )
        finding = Finding(week.name, f"quality:{q.evaluator}", text, d.estimate, 0.0)
        found.append((finding, d.high < 0))
    return found


def _failures(week: RolloutWeek) -> list[tuple[Finding, bool]]:
    base, cand = week.current.failures.get("baseline"), week.current.failures.get("candidate")
    if base is None or cand is None:
        return []
    # Route failures per call a route is answerable for: dropped and cancelled calls are
    # nobody's failure, and are left out of both counts.
    d = newcombe(wilson(cand.failed, cand.attributable), wilson(base.failed, base.attributable))
    if d is None or d.low <= 0 <= d.high:
        return []
    text = (
        f"candidate failure rate (errors, timeouts, fallbacks) {d.estimate * 100:+.1f} pts "
        f"vs baseline (95% CI {d.low * 100:+.1f} to {d.high * 100:+.1f})"
    )
    return [(Finding(week.name, "failures", text, d.estimate, 0.0), d.low > 0)]
