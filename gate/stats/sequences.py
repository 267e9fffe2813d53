"""Anytime-valid confidence sequences over sufficient statistics.

Every bound here is meant to hold uniformly over time: the probability that the true
value ever leaves the sequence, at any of the (arbitrarily many, data-dependent) looks,
is at most the stated alpha. That is what lets the gate recompute its verdict after every
pair. The betting family (below) guarantees it exactly, at every sample size; the
Gaussian-mixture family only asymptotically. `bench/gate_coverage.py` measures both
(bench/results/history-gate-statistics.md, "Time-uniform coverage of the gate's intervals").

All bounds are one-sided and come in pairs: an `Interval` carries a lower bound at
`alpha_lower` and an upper bound at `alpha_upper`, because the gate kills on a lower
bound (at its share of the kill budget) and promotes on an upper bound (at the
promotion budget). Its coverage is at least `1 - alpha_lower - alpha_upper`.

Two families:

* Means of unbounded, heavy-tailed values (latency log-ratios, parity statistics):
  the asymptotic confidence sequence of Waudby-Smith, Arnold, Wu, Ramdas and Howard,
  "Time-uniform central limit theory and asymptotic confidence sequences": a one-sided
  Gaussian-mixture (half-normal mixing) boundary applied to the sum standardised by the
  running sample variance. Assumptions: observations are i.i.d. with a finite
  variance (slightly more than two moments in the paper), and the guarantee is
  asymptotic, so sequences with fewer than `MIN_N` observations are left unbounded.
  Latency log-ratios are winsorised at +/- `LOG_RATIO_CLIP` before their sums are taken:
  the target is then the mean clipped log-ratio, which equals the log geometric-mean
  ratio unless a pair differs by more than twenty-fold; clipping keeps a few runaway
  pairs from dominating the variance.

* Means of bounded values (paired 0/1 differences in {-1, 0, 1}, proportions in {0, 1},
  per-request acceptance in [0, 1]): the betting confidence sequence of Waudby-Smith and
  Ramdas, in `gate.stats.betting`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import log_ndtr  # type: ignore[import-untyped]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
Num = float | FloatArray

# Twenty-fold in either direction; beyond that a pair is an outage, not a latency.
LOG_RATIO_CLIP = float(np.log(20.0))
# Below this many observations the asymptotic sequence is not trusted at all.
MIN_N = 20
_FIXED_POINT_STEPS = 4


@dataclass(frozen=True)
class MeanStats:
    """Sufficient statistics of a sample mean: count, sum and sum of squares."""

    n: Num
    total: Num
    total_sq: Num


@dataclass(frozen=True)
class EpisodeMean(MeanStats):
    """A sample mean whose observations come in episodes (conversations, agent runs).

    Beside count, sum and sum of squares of the values: `episodes`, the number of episodes
    with a value (G), and per episode e with n_e values summing to S_e, the sums over
    episodes of S_e^2 (`episode_sq`), of S_e n_e (`episode_cross`) and of n_e^2
    (`episode_n_sq`). Values without an episode are each their own episode, where these
    reduce to n, sum of squares, sum and n. All are sums over values, so they accumulate
    pair by pair (`gate.stats.columns.episode_mean`) and add across segments' pairs.
    """

    episodes: Num
    episode_sq: Num
    episode_cross: Num
    episode_n_sq: Num


@dataclass(frozen=True)
class PairedCounts:
    """Paired 0/1 bad-outcome differences, candidate minus baseline, by count.

    `worse` counts pairs where only the candidate had the bad outcome (difference +1),
    `better` pairs where only the baseline had it (difference -1); the rest are ties.
    """

    n: Num
    worse: Num
    better: Num


@dataclass(frozen=True)
class EpisodeCounts(PairedCounts):
    """Paired 0/1 differences whose pairs come in episodes.

    Beside the counts, `difference`: the differences in {-1, 0, 1} as an `EpisodeMean`, so
    that the cell is bounded like a mean with the episode as the unit (`mean_interval`,
    asymptotic) instead of by betting on independent pairs.
    """

    difference: EpisodeMean


@dataclass(frozen=True)
class CountStats:
    """A proportion: `k` bad outcomes among `n` trials."""

    n: Num
    k: Num


@dataclass(frozen=True)
class TwoMeans:
    """Unpaired means of the two cohorts (canary mode)."""

    baseline: MeanStats
    candidate: MeanStats


@dataclass(frozen=True)
class TwoCounts:
    """Unpaired proportions of the two cohorts (canary mode, greedy control)."""

    baseline: CountStats
    candidate: CountStats


@dataclass(frozen=True)
class EpisodeTwoCounts(TwoCounts):
    """Two proportions whose trials come in episodes (greedy control slice, shadow feedback).

    Beside each side's counts, its 0/1 outcomes as an `EpisodeMean` (`baseline_outcomes`,
    `candidate_outcomes`), so that the difference is bounded with the episode as the unit
    (`rate_cluster_interval`). A side's episodes may be the other side's too (feedback
    on both answers of a pair): the two sides are not assumed independent.
    """

    baseline_outcomes: EpisodeMean
    candidate_outcomes: EpisodeMean


@dataclass(frozen=True)
class CohortCounts:
    """Bad outcomes per cohort when each request reaches one route (canary).

    `n` requests were assigned, each to the candidate with probability `share`
    independently of its outcome; `candidate` and `baseline` count bad outcomes in each.
    """

    n: Num
    candidate: Num
    baseline: Num
    share: float


@dataclass(frozen=True)
class EpisodeCohorts(CohortCounts):
    """Canary cohort counts whose requests come in episodes, each served by one cohort.

    The cohort is drawn once per episode (sticky assignment), so the requests are not
    independent draws: beside the counts, `difference` holds each request's
    inverse-propensity pseudo-outcome (`cohort_values`) as an `EpisodeMean`, so that the
    cell is bounded like a mean with the episode, the randomisation unit, as the unit.
    """

    difference: EpisodeMean


def cohort_values(share: float) -> tuple[float, float]:
    """Return the pseudo-outcomes of a bad request in the baseline and the candidate cohort.

    With the candidate drawn with probability `share`, -1 / (1 - share) for a baseline
    request, 1 / share for a candidate one (0 when good): their mean is candidate minus
    baseline bad rate, whether cohorts are drawn per request or per episode.
    """
    return -1.0 / (1.0 - share), 1.0 / share


@dataclass(frozen=True)
class Interval:
    """An estimate with a lower bound at one alpha and an upper bound at another."""

    estimate: Num
    lower: Num
    upper: Num


def as_array(x: Num) -> FloatArray:
    """Return `x` as a float64 array (0-d for scalars)."""
    return np.asarray(x, dtype=np.float64)


def mixture_rho2(n_opt: float, alpha: float) -> float:
    """Return the mixing variance that makes the boundary tightest near `n_opt`.

    Args:
        n_opt: sample size (standardised units) at which the boundary should be tightest.
        alpha: one-sided error level.

    Returns:
        rho squared, as in Waudby-Smith et al.'s tuning rule.
    """
    log_term = -2.0 * np.log(alpha)
    return float((log_term + np.log(log_term + 1.0)) / max(n_opt, 1.0))


def mixture_multiplier(n: Num, alpha: float, n_opt: float) -> FloatArray:
    """Return the one-sided boundary in standard errors at sample size `n`.

    The half-normal mixture of exp(lambda S - lambda^2 V / 2) is
    2 Phi(z) exp(z^2 / 2) / sqrt(1 + rho^2 V) with z = S / sqrt(V + 1 / rho^2); it crosses
    1 / alpha where z solves log 2 + log Phi(z) + z^2 / 2 = log(1 / alpha) + log(1 + x) / 2,
    x = rho^2 V. In standard errors the bound is z sqrt((1 + x) / x).

    Args:
        n: number of observations (V in standardised units); array or scalar.
        alpha: one-sided error level.
        n_opt: where the boundary is tuned to be tightest.

    Returns:
        The multiplier; infinite where `n` is 0.
    """
    x = mixture_rho2(n_opt, alpha) * as_array(n)
    base = np.log(1.0 / (2.0 * alpha)) + 0.5 * np.log1p(x)
    z = np.sqrt(2.0 * base)
    # Fixed point: Phi(z) is close to 1 at any useful alpha, so this converges fast.
    for _ in range(_FIXED_POINT_STEPS):
        z = np.sqrt(2.0 * (base - log_ndtr(z)))
    with np.errstate(divide="ignore"):
        return np.asarray(z * np.sqrt((1.0 + x) / x), dtype=np.float64)


def _mean_and_variance(stats: MeanStats) -> tuple[FloatArray, FloatArray, FloatArray]:
    n = as_array(stats.n)
    safe = np.maximum(n, 1.0)
    mean = as_array(stats.total) / safe
    var = np.maximum(as_array(stats.total_sq) - as_array(stats.total) * mean, 0.0) / np.maximum(
        n - 1.0, 1.0
    )
    return n, mean, var


def _cluster_variance(stats: EpisodeMean) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Return (n, mean, squared standard error) with the episode as the unit.

    The cluster-robust (sandwich) variance of the mean: sum over episodes of the squared
    sum of the episode's centred values, sum_e (S_e - n_e mean)^2 / n^2, times G / (G - 1)
    as the per-value sample variance has n / (n - 1). With every episode a single value
    it is the per-value estimate `mean_interval` uses without episodes.
    """
    n = as_array(stats.n)
    g = as_array(stats.episodes)
    safe = np.maximum(n, 1.0)
    mean = as_array(stats.total) / safe
    centred = (
        as_array(stats.episode_sq)
        - 2.0 * mean * as_array(stats.episode_cross)
        + mean * mean * as_array(stats.episode_n_sq)
    )
    var_sum = np.maximum(centred, 0.0) * g / np.maximum(g - 1.0, 1.0)
    return n, mean, var_sum / (safe * safe)


def _radii(
    se: FloatArray, n: FloatArray, alpha_lower: float, alpha_upper: float, n_opt: float
) -> tuple[FloatArray, FloatArray]:
    # At n = 0 the multiplier is infinite and the SE zero; `_gated` masks those anyway.
    with np.errstate(invalid="ignore"):
        lo = se * mixture_multiplier(n, alpha_lower, n_opt)
        hi = se * mixture_multiplier(n, alpha_upper, n_opt)
    return np.nan_to_num(lo), np.nan_to_num(hi)


def _gated(
    estimate: FloatArray,
    radius_lo: FloatArray,
    radius_hi: FloatArray,
    n: FloatArray,
) -> Interval:
    small = n < MIN_N
    return Interval(
        estimate=np.where(n > 0, estimate, np.nan),
        lower=np.where(small, -np.inf, estimate - radius_lo),
        upper=np.where(small, np.inf, estimate + radius_hi),
    )


def mean_interval(
    stats: MeanStats, *, alpha_lower: float, alpha_upper: float, n_opt: float
) -> Interval:
    """Bound a mean with the asymptotic Gaussian-mixture confidence sequence.

    Args:
        stats: count, sum and sum of squares (of clipped log-ratios, or of rates).
        alpha_lower: error level of the lower bound.
        alpha_upper: error level of the upper bound.
        n_opt: sample size where the boundary is tuned to be tightest.

    Returns:
        Mean with its bounds; unbounded below `MIN_N` observations (estimate NaN at n=0).
        Zero variance gives a point interval: every observation was identical.
    """
    if isinstance(stats, EpisodeMean):
        # Episodes as the unit: the cluster-robust standard error on the same boundary,
        # and no bound before `MIN_N` episodes.
        n, mean, se2 = _cluster_variance(stats)
        radii = _radii(np.sqrt(se2), n, alpha_lower, alpha_upper, n_opt)
        return _gated(mean, *radii, np.minimum(n, as_array(stats.episodes)))
    n, mean, var = _mean_and_variance(stats)
    se = np.sqrt(var / np.maximum(n, 1.0))
    return _gated(mean, *_radii(se, n, alpha_lower, alpha_upper, n_opt), n)


def two_mean_interval(
    stats: TwoMeans, *, alpha_lower: float, alpha_upper: float, n_opt: float
) -> Interval:
    """Bound candidate minus baseline mean from two independent cohorts.

    The same Gaussian-mixture boundary, applied with n = both cohorts together and the
    plug-in standard error of a difference of independent means. This is the limit of
    the paper's inverse-propensity construction for randomised experiments when the
    cohort shares are stable (hash assignment keeps them so).

    Args:
        stats: the two cohorts' sufficient statistics.
        alpha_lower: error level of the lower bound.
        alpha_upper: error level of the upper bound.
        n_opt: total sample size where the boundary is tuned to be tightest.

    Returns:
        Difference with its bounds; unbounded until each cohort has `MIN_N` values.
    """
    sides = [_side_se2(stats.baseline), _side_se2(stats.candidate)]
    (nb, mb, vb, gb), (nc, mc, vc, gc) = sides
    radii = _radii(np.sqrt(vb + vc), nb + nc, alpha_lower, alpha_upper, n_opt)
    return _gated(mc - mb, *radii, np.minimum(gb, gc))


def _side_se2(stats: MeanStats) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Return one cohort's (n, mean, squared standard error, units: episodes or values)."""
    if isinstance(stats, EpisodeMean):
        n, mean, se2 = _cluster_variance(stats)
        return n, mean, se2, np.minimum(n, as_array(stats.episodes))
    n, mean, var = _mean_and_variance(stats)
    return n, mean, var / np.maximum(n, 1.0), n
