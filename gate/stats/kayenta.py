"""A Kayenta-style judge, for comparison only: Mann-Whitney U at 98%, repeated.

Netflix/Spinnaker's Kayenta compares each metric of canary and baseline with a
Mann-Whitney U test at 98% confidence and fails the canary when a critical metric
differs. Rerun at every look (as dashboards and pipelines do), the repeated fixed-horizon
test spends its 2% again at each look. Here every metric is critical, deviations in
either direction count (Kayenta's default), and the normal approximation with the tie
correction is used (n >= 50 per side at the first look).

`split=True` gives the judge what it is designed for: one route per request (canary),
taking the candidate side of even pairs and the baseline side of odd ones. Without it the
judge sees both sides of every pair and ignores the pairing.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm  # type: ignore[import-untyped]

from gate.stats.columns import PairColumns
from gate.stats.sequences import BoolArray, FloatArray, IntArray

Z_98 = float(norm.ppf(0.99))


def _mw_z(hx: FloatArray, hy: FloatArray) -> FloatArray:
    """Return the Mann-Whitney z of x over y from histograms over ordered bins (ties).

    Args:
        hx: counts of x per bin, bins ordered by value (last axis).
        hy: counts of y per bin.

    Returns:
        (U - nx ny / 2) / sd with the tie-corrected null variance; 0 where undefined.
    """
    below_y = np.cumsum(hy, axis=-1) - hy
    u = (hx * (below_y + 0.5 * hy)).sum(axis=-1)
    nx, ny = hx.sum(axis=-1), hy.sum(axis=-1)
    n, t = nx + ny, hx + hy
    ties = (t**3 - t).sum(axis=-1) / np.maximum(n * (n - 1.0), 1.0)
    var = nx * ny / 12.0 * ((n + 1.0) - ties)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (u - nx * ny / 2.0) / np.sqrt(var)
    return np.asarray(np.nan_to_num(z), dtype=np.float64)


def _bins(x: FloatArray, y: FloatArray, n_bins: int) -> tuple[IntArray, IntArray]:
    # Equal-width bins of log latency between each run's 0.1% and 99.9% points (taken from
    # a subsample; values beyond go to the end bins); missing values get bin -1.
    logs = np.log(np.concatenate([x, y], axis=-1))
    thin = max(1, logs.shape[-1] // 4000)
    lo, hi = np.nanquantile(logs[:, ::thin], [0.001, 0.999], axis=-1, keepdims=True)
    scaled = (logs - lo) / np.maximum(hi - lo, 1e-12) * n_bins
    binned = np.clip(np.nan_to_num(scaled, nan=-1.0), 0, n_bins - 1).astype(np.int64)
    binned[np.isnan(logs)] = -1
    half = x.shape[-1]
    return binned[:, :half], binned[:, half:]


def _z_at_looks(bx: IntArray, by: IntArray, n_bins: int, every: int) -> FloatArray:
    runs, total = bx.shape
    looks = total // every
    block = np.minimum(np.arange(total) // every, looks)  # a ragged tail block is dropped
    hists = []
    for b in (bx, by):
        # One bincount over (run, block, bin), then cumulative over blocks.
        flat = (np.arange(runs)[:, None] * (looks + 1) + block[None, :]) * n_bins + b
        counts = np.bincount(flat[b >= 0], minlength=runs * (looks + 1) * n_bins)
        hist = counts.reshape(runs, looks + 1, n_bins)[:, :looks].astype(np.float64)
        hists.append(np.cumsum(hist, axis=1))
    return _mw_z(hists[0], hists[1])


def _sides(values: FloatArray, split: bool) -> tuple[FloatArray, FloatArray]:
    if not split:
        return values[..., 1], values[..., 0]
    # One route per request: candidate on even pairs, baseline on odd ones.
    even = np.arange(values.shape[-2]) % 2 == 0
    return np.where(even, values[..., 1], np.nan), np.where(~even, values[..., 0], np.nan)


def kayenta_fails(
    cols: PairColumns, *, every: int = 100, split: bool = False, n_bins: int = 256
) -> BoolArray:
    """Return, per run and look, whether the judge has failed the canary by then.

    Latencies are cut into `n_bins` equal-width bins of log latency per run, so the test
    is Mann-Whitney on binned values with ties (256 bins, 0.025 sd wide: the same test for
    practical purposes, and O(bins) per look instead of O(pairs)).
    """
    failed = np.zeros((cols.segment.shape[0], cols.segment.shape[-1] // every), dtype=bool)
    for metric in (cols.tpot, cols.ttft, cols.e2e):
        cand, base = _sides(metric, split)
        bx, by = _bins(cand, base, n_bins)
        failed |= np.abs(_z_at_looks(bx, by, n_bins, every)) > Z_98
    bad_sides = [cols.failed.astype(np.float64)]
    bad_sides += [np.where(cols.failed, 1.0, e) for e in cols.evals.values()]
    for bad in bad_sides:
        cand, base = _sides(bad, split)
        bx, by = (np.where(np.isnan(v), -1, v).astype(np.int64) for v in (cand, base))
        failed |= np.abs(_z_at_looks(bx, by, 2, every)) > Z_98
    return np.logical_or.accumulate(failed, axis=-1)
