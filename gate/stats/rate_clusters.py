"""Rate cells whose outcomes come in episodes (issue 39): paired 0/1 differences, canary
cohort pseudo-outcomes and two proportions, bounded with the episode as the unit.

The clustered (cluster-robust) variance of such a cell has little to go on while few bad
outcomes have been seen (none without any), so it is floored at each end's threshold by
the least variance the null's mean allows there times a design effect that starts at the
worst case (every request of an episode alike) and moves toward the observed one
(`rate_cluster_interval`). `gate.stats.cell_checks` proves a cell only where this interval
and the exact bet on independent trials agree.
"""

from __future__ import annotations

import numpy as np

from gate.stats.sequences import (
    MIN_N,
    EpisodeCohorts,
    EpisodeCounts,
    EpisodeMean,
    EpisodeTwoCounts,
    FloatArray,
    Interval,
    _cluster_variance,
    _gated,
    as_array,
    cohort_values,
    mixture_multiplier,
)

# The worst within-episode correlation counts as this many bad outcomes in a rate cell's
# design effect until the observed ones outweigh it (`rate_cluster_interval`).
PRIOR_OUTCOMES = float(MIN_N)


EpisodeRates = EpisodeCounts | EpisodeCohorts | EpisodeTwoCounts


def rate_values(stats: EpisodeRates) -> tuple[float, float]:
    """Return the lowest and highest value of a rate cell's differences (or pseudo-outcomes)."""
    if isinstance(stats, EpisodeCohorts):
        return cohort_values(stats.share)
    return -1.0, 1.0


def _design_effect(values: EpisodeMean, largest: float) -> FloatArray:
    n = np.maximum(as_array(values.n), 1.0)
    worst = as_array(values.episode_n_sq) / n
    prior = PRIOR_OUTCOMES * largest**2
    return np.asarray(
        (as_array(values.episode_sq) + prior * worst) / (as_array(values.total_sq) + prior)
    )


def design_effect(stats: EpisodeCounts | EpisodeCohorts) -> FloatArray:
    """Return the rate cell's design effect, shrunk toward the worst case.

    Observed: sum_e S_e^2 / sum x^2 (1 when each bad outcome is alone in its episode, n_e
    when episodes are all bad or all good). Worst: sum_e n_e^2 / n (every episode's values
    alike). `PRIOR_OUTCOMES` outcomes of the largest value at the worst case are added to
    the observed ones, so with none observed it is the worst case.
    """
    return _design_effect(stats.difference, max(rate_values(stats), key=abs))


def _rate_spread(stats: EpisodeRates) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Return a rate cell's (n, estimate, clustered squared SE, design effect per value).

    Two proportions: the difference of the sides' means, its standard error the sum of
    theirs (Cauchy-Schwarz: valid whatever the sides' episodes share), and the design
    effect per value the smaller side's, `least_variance` of a difference of two rates
    being reached with all the variance on one side.
    """
    if isinstance(stats, EpisodeTwoCounts):
        sides = [_cluster_variance(v) for v in (stats.baseline_outcomes, stats.candidate_outcomes)]
        (nb, mb, se2b), (nc, mc, se2c) = sides
        per_value = np.minimum(
            _design_effect(stats.baseline_outcomes, 1.0) / np.maximum(nb, 1.0),
            _design_effect(stats.candidate_outcomes, 1.0) / np.maximum(nc, 1.0),
        )
        return nb + nc, mc - mb, (np.sqrt(se2b) + np.sqrt(se2c)) ** 2, per_value
    n, mean, se2 = _cluster_variance(stats.difference)
    return n, mean, se2, design_effect(stats) / np.maximum(n, 1.0)


def _rate_units(stats: EpisodeRates) -> FloatArray:
    """Return the episodes a rate cell's interval stands on (the fewer side's, if two)."""
    if isinstance(stats, EpisodeTwoCounts):
        sides = (stats.baseline_outcomes, stats.candidate_outcomes)
        return np.asarray(
            np.minimum(*(np.minimum(as_array(v.n), as_array(v.episodes)) for v in sides))
        )
    d = stats.difference
    return np.asarray(np.minimum(as_array(d.n), as_array(d.episodes)))


def least_variance(lo: float, hi: float, m: float) -> float:
    """Return the least variance of a value in {lo, 0, hi} (lo < 0 < hi) whose mean is `m`.

    The mass away from 0 sits on one side only: P(hi) = m / hi, variance m hi - m^2
    (m < 0: on lo). 0 at m = 0 or beyond the range.
    """
    m = float(np.clip(m, lo, hi)) if np.isfinite(m) else 0.0
    return max(m * (hi if m > 0 else lo) - m * m, 0.0)


def rate_cluster_interval(
    stats: EpisodeRates,
    *,
    kill_at: float,
    margin: float,
    alpha_lower: float,
    alpha_upper: float,
    n_opt: float,
) -> Interval:
    """Bound a rate cell's difference with the episode as the unit (issue 39).

    The cluster-robust interval of `mean_interval`, with the variance of the sum floored,
    for each end at the threshold it is tested against (lower at `kill_at`, upper at
    `margin`), by what that null implies: the least variance per value its mean allows
    (`least_variance`) times n times the design effect (`design_effect`: the observed
    one, shrunk toward every episode's values alike). With few bad outcomes the clustered
    variance has few episodes to go on (none without any), and the floor stands for the
    correlation not yet seen. Each end answers its test as a bound at its threshold.
    Paired differences, canary pseudo-outcomes and two proportions (`_rate_spread`) alike.
    """
    n, mean, se2, per_value = _rate_spread(stats)
    lo, hi = rate_values(stats)

    def se(threshold: float) -> FloatArray:
        return np.sqrt(np.maximum(se2, least_variance(lo, hi, threshold) * per_value))

    with np.errstate(invalid="ignore"):
        radius_lo = np.nan_to_num(se(kill_at) * mixture_multiplier(n, alpha_lower, n_opt))
        radius_hi = np.nan_to_num(se(margin) * mixture_multiplier(n, alpha_upper, n_opt))
    return _gated(mean, radius_lo, radius_hi, _rate_units(stats))
