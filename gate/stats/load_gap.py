"""The load hold: whether the gain is proven at the load the next stage brings.

The load bands (`BandStats`) give each band's gain interval; `load_gap` compares the highest
load at which the gain is proven with the next stage's share of the baseline's load
(policy `guardrails.load_bands`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gate.stats.gate_stats import BandStats, GateStats
from gate.stats.ids import ALL
from gate.stats.policy import Policy
from gate.stats.registry import banded
from gate.stats.sequences import BoolArray, FloatArray, Interval, Num, mean_interval


@dataclass(frozen=True)
class LoadGap:
    """Where the gain is proven against the load the next stage brings (running requests).

    `proven_load`: the highest mean candidate load at which the gain is proven (the pooled
    mean, or a band's whose own gain is proven); `target`: next share x the baseline's
    mean load; `untested`: the hold applies (proven load below target - max_gap x baseline).
    """

    proven_load: FloatArray
    target: FloatArray
    baseline: FloatArray
    untested: BoolArray


def band_intervals(policy: Policy, bands: BandStats) -> list[Interval]:
    """Return each band's log-ratio interval, both bounds at alpha_promote."""
    return [
        mean_interval(
            g,
            alpha_lower=policy.alpha_promote,
            alpha_upper=policy.alpha_promote,
            n_opt=policy.n_opt(ALL) / len(bands.gain),
        )
        for g in bands.gain
    ]


def load_gap(policy: Policy, stats: GateStats) -> LoadGap:
    """Return where the gain is proven, against the load the next stage will bring."""
    b, nothing = stats.bands, np.asarray(np.nan)
    if b is None or banded(policy) is None or b.next_share is None:
        return LoadGap(nothing, nothing, nothing, np.asarray(False))
    n = _total([g.n for g in b.gain])
    some = n > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        base = _total(list(b.baseline_load)) / n
        proven = _total(list(b.candidate_load)) / n  # the pooled gain's load
        goal = np.log1p(-policy.primary.min_gain)
        for g, load, got in zip(b.gain, b.candidate_load, band_intervals(policy, b), strict=True):
            m = np.asarray(g.n, dtype=np.float64)
            here = np.asarray(load, dtype=np.float64) / m
            shown = (m > 0) & (np.asarray(got.upper) < goal)
            proven = np.where(shown, np.fmax(proven, here), proven)
    target = b.next_share * base
    cfg = policy.guardrails.load_bands
    untested = some & cfg.hold_untested_load & (proven < target - cfg.max_gap * base)
    return LoadGap(proven, target, base, np.asarray(untested))


def _total(values: list[Num]) -> FloatArray:
    out = np.asarray(0.0)
    for v in values:
        out = out + np.asarray(v, dtype=np.float64)
    return out
