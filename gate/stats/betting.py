"""Exact confidence sequences for bounded values, by betting.

Method: the betting confidence sequence of Waudby-Smith and Ramdas, "Estimating means of
bounded random variables by betting", with a fixed grid of constant bets mixed with equal
weights. With constant bets the capital depends only on how many observations took each
value, so it is computed from counts (sufficient statistics), exactly (non-asymptotic),
with no ordering of the data. Assumption: observations are i.i.d. (pairs independent of
each other; in canary mode, cohorts assigned independently of outcomes, as a hash of the
request does). Where a cohort is drawn per episode the requests are not independent
draws: `gate.stats.rule` then also asks the clustered interval (`EpisodeCohorts`).

Used for paired 0/1 differences in {-1, 0, 1} (evaluator fails, failures, tail
exceedance), proportions in {0, 1}, and canary cohorts through inverse-propensity
pseudo-outcomes in {-1 / (1 - w), 0, 1 / w}.

Values anywhere in [0, 1] (per-request draft acceptance, against its floor) take the same
bets, with the capital bounded below by a quadratic in each value so that count, sum and
sum of squares suffice (`bounded_log_wealth`): still exact, somewhat less powerful than
the capital itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from gate.stats.sequences import (
    BoolArray,
    CohortCounts,
    CountStats,
    FloatArray,
    Interval,
    MeanStats,
    Num,
    PairedCounts,
    TwoCounts,
    as_array,
    cohort_values,
)

# Fractions of the largest admissible bet; geometric so one is within ~22% of the
# optimal constant bet for effects from ~1% to ~95% of the range. 12 bets cost log(12)
# of capital, about what the Gaussian mixture pays for its own spread.
BET_FRACTIONS: FloatArray = 0.95 / 1.5 ** np.arange(12, dtype=np.float64)
# 2^-30 of the range: far below any margin a policy would state.
_BISECTION_STEPS = 30


def bet_log_wealth(
    values: Sequence[float], counts: Sequence[Num], m: Num, *, above: bool
) -> FloatArray:
    """Return the log capital of the equal-weight mixture of constant bets against `m`.

    Betting that the mean exceeds `m` (`above`), each observation x multiplies capital by
    1 + lam (x - m) with lam = f / (m - min(values)), f in `BET_FRACTIONS`; betting it is
    below, by 1 - lam (x - m) with lam = f / (max(values) - m). Under the null (mean <= m,
    resp. >= m) every such capital is a nonnegative supermartingale, so by Ville's
    inequality it ever reaches 1 / alpha with probability at most alpha.

    Args:
        values: the distinct values the observations take, ascending.
        counts: how many observations took each value (arrays broadcast together).
        m: the null mean being tested.
        above: the direction of the bet.

    Returns:
        log of the mixture capital, same shape as the broadcast inputs.
    """
    return _log_mean_exp(_log_capitals(values, counts, m, above))


def bet_rejects(
    values: Sequence[float], counts: Sequence[Num], m: float, alpha: float, *, above: bool
) -> BoolArray:
    """Return whether the mixture capital against a fixed `m` has reached 1 / alpha."""
    capitals = _log_capitals(values, counts, m, above)
    threshold = np.log(1.0 / alpha)
    best = capitals.max(axis=-1)
    # The mean of G capitals lies between max / G and max: decide most looks from the max.
    out = np.asarray(best - np.log(BET_FRACTIONS.size) >= threshold)
    unsure = (best >= threshold) & ~out
    if unsure.any():
        out[unsure] = _log_mean_exp(capitals[unsure]) >= threshold
    return out


def _log_capitals(
    values: Sequence[float], counts: Sequence[Num], m: Num, above: bool
) -> FloatArray:
    lo, hi = values[0], values[-1]
    sign = 1.0 if above else -1.0
    if np.ndim(m) == 0:
        # One null for every look: a (values x bets) table of log factors and one matmul.
        m0 = float(np.clip(m, lo + 1e-12, hi - 1e-12))
        lam = BET_FRACTIONS / ((m0 - lo) if above else (hi - m0))
        table = np.log1p(sign * lam[None, :] * (np.asarray(values)[:, None] - m0))
        stacked = np.stack(np.broadcast_arrays(*(as_array(c) for c in counts)), axis=-1)
        return np.asarray(stacked @ table, dtype=np.float64)
    m_arr = np.clip(as_array(m), lo + 1e-12, hi - 1e-12)[..., None]
    lam_arr = BET_FRACTIONS / ((m_arr - lo) if above else (hi - m_arr))
    log_capital = np.zeros(np.broadcast_shapes(m_arr.shape, BET_FRACTIONS.shape))
    for value, count in zip(values, counts, strict=True):
        step = np.log1p(sign * lam_arr * (value - m_arr))
        log_capital = log_capital + as_array(count)[..., None] * step
    return log_capital


def _log_mean_exp(x: FloatArray) -> FloatArray:
    top = x.max(axis=-1)
    return np.asarray(top + np.log(np.exp(x - top[..., None]).mean(axis=-1)), dtype=np.float64)


def bet_bound(
    values: Sequence[float], counts: Sequence[Num], alpha: float, *, lower: bool
) -> FloatArray:
    """Return the lower (or upper) end of the betting confidence sequence by bisection.

    Args:
        values: the distinct values, ascending.
        counts: counts of each value.
        alpha: one-sided error level.
        lower: which end.

    Returns:
        The bound; the end of the range when nothing can be excluded yet.
    """
    shape = np.broadcast_shapes(*(np.shape(c) for c in counts))
    return _bisect(
        lambda m: bet_log_wealth(values, counts, m, above=lower),
        shape, (float(values[0]), float(values[-1])), alpha, lower=lower,
    )  # fmt: skip


def _bisect(
    log_wealth: Callable[[FloatArray], FloatArray],
    shape: tuple[int, ...],
    bounds: tuple[float, float],
    alpha: float,
    *,
    lower: bool,
) -> FloatArray:
    """Return the end of {m : log_wealth(m) < log(1 / alpha)} within `bounds`.

    The capital must be monotone in m (falling for a lower end, rising for an upper), so
    the rejected set is a half-line and bisection finds its edge.
    """
    lo, hi = np.full(shape, bounds[0]), np.full(shape, bounds[1])
    threshold = np.log(1.0 / alpha)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        rejected = log_wealth(mid) >= threshold
        if lower:
            lo, hi = np.where(rejected, mid, lo), np.where(rejected, hi, mid)
        else:
            lo, hi = np.where(rejected, lo, mid), np.where(rejected, mid, hi)
    return lo if lower else hi


def _values(stats: PairedCounts | CohortCounts) -> tuple[list[float], list[Num]]:
    if isinstance(stats, PairedCounts):
        n, worse, better = as_array(stats.n), as_array(stats.worse), as_array(stats.better)
        return [-1.0, 0.0, 1.0], [better, n - worse - better, worse]
    # Inverse-propensity pseudo-outcome: its mean is candidate minus baseline bad rate.
    cand, base = as_array(stats.candidate), as_array(stats.baseline)
    rest = as_array(stats.n) - cand - base
    low, high = cohort_values(stats.share)
    return [low, 0.0, high], [base, rest, cand]


def exceeds(stats: PairedCounts | CohortCounts, m: float, alpha: float) -> BoolArray:
    """Return whether the rate difference is proven above `m` (lower bound > m)."""
    values, counts = _values(stats)
    return bet_rejects(values, counts, m, alpha, above=True)


def below(stats: PairedCounts | CohortCounts, m: float, alpha: float) -> BoolArray:
    """Return whether the rate difference is proven below `m` (upper bound < m)."""
    values, counts = _values(stats)
    return bet_rejects(values, counts, m, alpha, above=False)


def diff_interval(
    stats: PairedCounts | CohortCounts, *, alpha_lower: float, alpha_upper: float
) -> Interval:
    """Bound candidate minus baseline bad-outcome rate, paired or by cohort.

    Args:
        stats: paired discordant counts, or canary cohort counts.
        alpha_lower: error level of the lower bound.
        alpha_upper: error level of the upper bound.

    Returns:
        Difference in rates with its bounds, within [-1, 1]; NaN estimate at n=0.
    """
    values, counts = _values(stats)
    n = as_array(stats.n)
    estimate = sum(v * as_array(c) for v, c in zip(values, counts, strict=True))
    # A cohort's pseudo-outcomes range over ±1/share, beyond any difference of two rates;
    # the rates' own range holds the true difference, so cutting to it keeps coverage.
    return Interval(
        estimate=_rate_difference(np.where(n > 0, estimate / np.maximum(n, 1.0), np.nan)),
        lower=_rate_difference(bet_bound(values, counts, alpha_lower, lower=True)),
        upper=_rate_difference(bet_bound(values, counts, alpha_upper, lower=False)),
    )


def _rate_difference(value: Num) -> FloatArray:
    """Clip to [-1, 1], the range of a difference of two rates (NaN stays NaN)."""
    return np.asarray(np.clip(as_array(value), -1.0, 1.0), dtype=np.float64)


def proportion_interval(stats: CountStats, *, alpha_lower: float, alpha_upper: float) -> Interval:
    """Bound a proportion with the betting confidence sequence on {0, 1}.

    Args:
        stats: trials and bad outcomes.
        alpha_lower: error level of the lower bound.
        alpha_upper: error level of the upper bound.

    Returns:
        The rate with its bounds, within [0, 1]; NaN estimate at n=0.
    """
    n, k = as_array(stats.n), as_array(stats.k)
    counts: list[Num] = [n - k, k]
    return Interval(
        estimate=np.where(n > 0, k / np.maximum(n, 1.0), np.nan),
        lower=bet_bound([0.0, 1.0], counts, alpha_lower, lower=True),
        upper=bet_bound([0.0, 1.0], counts, alpha_upper, lower=False),
    )


def two_proportion_interval(
    stats: TwoCounts, *, alpha_lower: float, alpha_upper: float
) -> Interval:
    """Bound candidate minus baseline rate from two independent cohorts.

    Each cohort gets its own betting sequence at half the level; a union bound makes the
    difference of their ends valid at the full level. Exact, and conservative.

    Args:
        stats: the two cohorts' trials and bad outcomes.
        alpha_lower: error level of the lower bound.
        alpha_upper: error level of the upper bound.

    Returns:
        Difference in rates with its bounds, within [-1, 1].
    """
    base = proportion_interval(
        stats.baseline, alpha_lower=alpha_upper / 2, alpha_upper=alpha_lower / 2
    )
    cand = proportion_interval(
        stats.candidate, alpha_lower=alpha_lower / 2, alpha_upper=alpha_upper / 2
    )
    return Interval(
        estimate=as_array(cand.estimate) - as_array(base.estimate),
        lower=as_array(cand.lower) - as_array(base.upper),
        upper=as_array(cand.upper) - as_array(base.lower),
    )


# --- means of values in [0, 1], from count, sum and sum of squares ---------------------

# log(1 - f) + f for each bet fraction f: the quadratic term of Fan et al.'s bound.
_SLACK: FloatArray = np.log1p(-BET_FRACTIONS) + BET_FRACTIONS
# Each bet's bound f xi + slack xi^2 rises with xi up to xi = f / (-2 slack); betting above
# m, xi <= (1 - m) / m, so the bound falls with m wherever m >= 1 / (1 + that turn).
_MONOTONE_FROM: FloatArray = 1.0 / (1.0 - BET_FRACTIONS / (2.0 * _SLACK))


def bounded_log_wealth(stats: MeanStats, m: Num, *, above: bool) -> FloatArray:
    """Return a lower bound on the log capital of the mixture of bets on values in [0, 1].

    Betting that the mean exceeds `m` (`above`), each value x multiplies capital by
    1 + f xi, xi = (x - m) / m >= -1, for each fraction f in `BET_FRACTIONS`: under the null
    (mean <= m) a nonnegative supermartingale, as in `bet_log_wealth`. Its log is at least
    f xi + (log(1 - f) + f) xi^2 (Fan, Grama and Liu 2015; the bound Waudby-Smith and Ramdas
    use for their predictable plug-in sequences), whose sum over the values needs only their
    count, sum and sum of squares: a fold of SQL aggregates keeps it. Each bet's bound is
    taken at max(m, the m from which it falls with m): a bet above m wins more the lower m
    is, so this stays a lower bound, and it makes the capital monotone in m (a half-line
    of rejected m, as bisection needs). Betting below is betting
    above on 1 - x. Exact (Ville's inequality) at every sample size; no variance assumed.

    Args:
        stats: count, sum and sum of squares of values in [0, 1].
        m: the null mean being tested.
        above: the direction of the bet.

    Returns:
        log of the mixture capital's lower bound, broadcast over `stats` and `m`.
    """
    n, s, ss, m = (as_array(v) for v in (stats.n, stats.total, stats.total_sq, m))
    if not above:
        s, ss, m = n - s, n - 2.0 * s + ss, 1.0 - m
    at = np.maximum(m[..., None], _MONOTONE_FROM)
    n, s, ss = n[..., None], s[..., None], ss[..., None]
    total = (s - n * at) / at
    square = np.maximum(ss - 2.0 * at * s + n * at * at, 0.0) / (at * at)
    return _log_mean_exp(np.asarray(BET_FRACTIONS * total + _SLACK * square))


def bounded_rejects(stats: MeanStats, m: float, alpha: float, *, above: bool) -> BoolArray:
    """Return whether the mean of values in [0, 1] is proven above (below) a fixed `m`."""
    return np.asarray(bounded_log_wealth(stats, m, above=above) >= np.log(1.0 / alpha))


def bounded_mean_interval(stats: MeanStats, *, alpha_lower: float, alpha_upper: float) -> Interval:
    """Bound the mean of values in [0, 1] (per-request acceptance) by betting.

    Args:
        stats: count, sum and sum of squares of the values.
        alpha_lower: error level of the lower bound.
        alpha_upper: error level of the upper bound.

    Returns:
        Mean with its bounds, within [0, 1]; [0, 1] until the data exclude anything, and a
        NaN estimate at n=0.
    """
    n = as_array(stats.n)
    shape = np.broadcast_shapes(n.shape, np.shape(stats.total), np.shape(stats.total_sq))
    return Interval(
        estimate=np.where(n > 0, as_array(stats.total) / np.maximum(n, 1.0), np.nan),
        lower=_bisect(
            lambda m: bounded_log_wealth(stats, m, above=True),
            shape, (0.0, 1.0), alpha_lower, lower=True,
        ),
        upper=_bisect(
            lambda m: bounded_log_wealth(stats, m, above=False),
            shape, (0.0, 1.0), alpha_upper, lower=False,
        ),
    )  # fmt: skip
