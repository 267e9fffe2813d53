"""How the rule judges one cell: its harm interval, and where it is proven harmful or inside.

Means, paired and cohort counts, episodes (never narrower than the exact bet on independent
pairs), acceptance's floor, two-sided rules and per-token exactness each have their test
here; `gate.stats.rule.apply_rule` runs them on every cell of a look.
"""

from __future__ import annotations

import numpy as np

from gate.stats import exactness
from gate.stats.betting import (
    below,
    bounded_mean_interval,
    bounded_rejects,
    diff_interval,
    exceeds,
    two_proportion_interval,
)
from gate.stats.exactness import TokenBins
from gate.stats.gate_stats import CellStats
from gate.stats.rate_clusters import EpisodeRates, rate_cluster_interval
from gate.stats.registry import Rule
from gate.stats.sequences import (
    BoolArray,
    CohortCounts,
    EpisodeCohorts,
    EpisodeCounts,
    EpisodeMean,
    EpisodeTwoCounts,
    FloatArray,
    Interval,
    MeanStats,
    PairedCounts,
    TwoCounts,
    TwoMeans,
    mean_interval,
    two_mean_interval,
)


def harm_interval(
    stats: CellStats, rule: Rule, *, alpha_kill: float, alpha_promote: float, n_opt: float
) -> Interval:
    """Return the harm interval: lower bound at the kill level, upper at promotion's.

    For acceptance (a floor) the harm is floor minus mean acceptance, bounded by betting on
    values in [0, 1] (exact). A two-sided rule's interval has each bound at half the kill
    level (the shift may go either way).
    """
    if isinstance(stats, TokenBins):
        return exactness.deviation(stats, alpha_kill).interval
    if rule.two_sided:
        alpha_promote = alpha_kill = alpha_kill / 2
    if isinstance(stats, MeanStats) and rule.floor is not None:
        acc = bounded_mean_interval(stats, alpha_lower=alpha_promote, alpha_upper=alpha_kill)
        lower, upper = np.asarray(acc.lower), np.asarray(acc.upper)
        if isinstance(stats, EpisodeMean):  # never narrower than the clustered interval
            clustered = mean_interval(
                stats, alpha_lower=alpha_promote, alpha_upper=alpha_kill, n_opt=n_opt
            )
            single = _each_alone(stats)
            lower = np.where(single, lower, np.minimum(lower, np.asarray(clustered.lower)))
            upper = np.where(single, upper, np.maximum(upper, np.asarray(clustered.upper)))
        return Interval(
            estimate=rule.floor - np.asarray(acc.estimate),
            lower=rule.floor - upper,
            upper=rule.floor - lower,
        )
    if isinstance(stats, MeanStats):
        return mean_interval(stats, alpha_lower=alpha_kill, alpha_upper=alpha_promote, n_opt=n_opt)
    if isinstance(stats, TwoMeans):
        return two_mean_interval(
            stats, alpha_lower=alpha_kill, alpha_upper=alpha_promote, n_opt=n_opt
        )
    if isinstance(stats, EpisodeCounts | EpisodeCohorts | EpisodeTwoCounts):
        clustered = rate_cluster_interval(
            stats, kill_at=rule.kill_at, margin=rule.margin,
            alpha_lower=alpha_kill, alpha_upper=alpha_promote, n_opt=n_opt,
        )  # fmt: skip
        alone = _exact_bet(stats, alpha_kill=alpha_kill, alpha_promote=alpha_promote)
        single = _every_pair_alone(stats)
        (est, a_lo, a_hi), (_, c_lo, c_hi) = _ends(alone), _ends(clustered)
        # With episodes, never narrower than the exact bet on independent pairs (requests
        # in canary, trials for two proportions); the clustered interval's variance is
        # floored at each end's threshold (`rate_cluster_interval`: with no bad outcome it
        # would be 0).
        # A cohort's pseudo-outcomes range beyond ±1; a rate difference does not.
        c_lo, c_hi = np.clip(c_lo, -1.0, 1.0), np.clip(c_hi, -1.0, 1.0)
        return Interval(
            estimate=est,
            lower=np.where(single, a_lo, np.minimum(a_lo, c_lo)),
            upper=np.where(single, a_hi, np.maximum(a_hi, c_hi)),
        )
    if isinstance(stats, PairedCounts | CohortCounts):
        return diff_interval(stats, alpha_lower=alpha_kill, alpha_upper=alpha_promote)
    return two_proportion_interval(stats, alpha_lower=alpha_kill, alpha_upper=alpha_promote)


def cell_n(stats: CellStats) -> FloatArray:
    """Return the number of observations behind a cell (the candidate's, if unpaired)."""
    if isinstance(stats, TwoMeans | TwoCounts):
        return np.asarray(stats.candidate.n, dtype=np.float64)
    return np.asarray(stats.n, dtype=np.float64)


def check_cell(
    stats: CellStats, rule: Rule, *, alpha_kill: float, alpha_promote: float, n_opt: float
) -> tuple[BoolArray, BoolArray]:
    """Return where the cell is proven harmful and where it is proven inside its margin."""
    if isinstance(stats, TokenBins):
        kill = rule.kill_at
        harmful = (
            exactness.harmful(stats, kill, alpha_kill)
            if np.isfinite(kill)
            else np.zeros(np.shape(stats.n), dtype=bool)
        )
        return harmful, exactness.inside(stats, rule.margin, alpha_promote)
    if rule.two_sided:
        return _two_sided(
            stats, rule, alpha_kill=alpha_kill, alpha_promote=alpha_promote, n_opt=n_opt
        )
    # Same answers as the intervals, without bisection: test at the thresholds.
    if isinstance(stats, EpisodeCounts | EpisodeCohorts | EpisodeTwoCounts):
        # The exact bet's own bounds are the tests below: only the clustered ones needed.
        got = rate_cluster_interval(
            stats, kill_at=rule.kill_at, margin=rule.margin,
            alpha_lower=alpha_kill, alpha_upper=alpha_promote, n_opt=n_opt,
        )  # fmt: skip
        single = _every_pair_alone(stats)
        bet_kill, bet_inside = _bet_tests(
            stats, rule, alpha_kill=alpha_kill, alpha_promote=alpha_promote
        )
        # With episodes both must hold: the exact bet and the clustered interval.
        return (
            np.where(single, bet_kill, bet_kill & (got.lower > rule.kill_at)),
            np.where(single, bet_inside, bet_inside & (got.upper < rule.margin)),
        )
    if isinstance(stats, PairedCounts | CohortCounts):
        return exceeds(stats, rule.kill_at, alpha_kill), below(stats, rule.margin, alpha_promote)
    if isinstance(stats, MeanStats) and rule.floor is not None:
        # Harm is floor minus the mean: killed when the mean is proven below the floor.
        below_floor = bounded_rejects(stats, rule.floor, alpha_kill, above=False)
        above_floor = bounded_rejects(stats, rule.floor, alpha_promote, above=True)
        if isinstance(stats, EpisodeMean):
            # With episodes both must hold: the exact bet and the clustered interval (a
            # hard conversation lowers every one of its requests' acceptance).
            got = harm_interval(
                stats, rule, alpha_kill=alpha_kill, alpha_promote=alpha_promote, n_opt=n_opt
            )
            single = _each_alone(stats)
            below_floor = np.where(single, below_floor, below_floor & (np.asarray(got.lower) > 0))
            above_floor = np.where(single, above_floor, above_floor & (np.asarray(got.upper) < 0))
        return below_floor, above_floor
    got = harm_interval(
        stats, rule, alpha_kill=alpha_kill, alpha_promote=alpha_promote, n_opt=n_opt
    )
    return np.asarray(got.lower) > rule.kill_at, np.asarray(got.upper) < rule.margin


def _pairs_of(stats: EpisodeRates) -> PairedCounts | CohortCounts | TwoCounts:
    """Return the counts alone, for the exact bet that treats each pair as independent."""
    if isinstance(stats, EpisodeCohorts):
        return CohortCounts(stats.n, stats.candidate, stats.baseline, stats.share)
    if isinstance(stats, EpisodeTwoCounts):
        return TwoCounts(stats.baseline, stats.candidate)
    return PairedCounts(stats.n, stats.worse, stats.better)


def _exact_bet(stats: EpisodeRates, *, alpha_kill: float, alpha_promote: float) -> Interval:
    """Return the exact betting interval of a rate cell's counts as independent trials."""
    counts = _pairs_of(stats)
    if isinstance(counts, TwoCounts):
        return two_proportion_interval(counts, alpha_lower=alpha_kill, alpha_upper=alpha_promote)
    return diff_interval(counts, alpha_lower=alpha_kill, alpha_upper=alpha_promote)


def _bet_tests(
    stats: EpisodeRates, rule: Rule, *, alpha_kill: float, alpha_promote: float
) -> tuple[BoolArray, BoolArray]:
    """Return where the exact bet on independent trials proves harm, and where inside."""
    counts = _pairs_of(stats)
    if isinstance(counts, TwoCounts):
        got = _exact_bet(stats, alpha_kill=alpha_kill, alpha_promote=alpha_promote)
        return np.asarray(got.lower) > rule.kill_at, np.asarray(got.upper) < rule.margin
    return exceeds(counts, rule.kill_at, alpha_kill), below(counts, rule.margin, alpha_promote)


def _every_pair_alone(stats: EpisodeRates) -> BoolArray:
    """Return where every episode of the cell is one pair: there, the exact betting sequence
    on independent pairs; elsewhere the asymptotic one with episodes as the unit. Which
    one depends on how the pairs arrived, never on their outcomes."""
    if isinstance(stats, EpisodeTwoCounts):
        sides = (stats.baseline_outcomes, stats.candidate_outcomes)
        return np.asarray(np.logical_and(*(_each_alone(v) for v in sides)))
    return np.asarray(np.asarray(stats.difference.episodes) >= np.asarray(stats.n))


def _each_alone(stats: EpisodeMean) -> BoolArray:
    """Return where every episode of a mean's cell holds one value (see `_every_pair_alone`)."""
    return np.asarray(np.asarray(stats.episodes) >= np.asarray(stats.n))


def _ends(got: Interval) -> tuple[FloatArray, FloatArray, FloatArray]:
    return tuple(np.asarray(v, dtype=np.float64) for v in (got.estimate, got.lower, got.upper))  # type: ignore[return-value]


def _two_sided(
    stats: CellStats, rule: Rule, *, alpha_kill: float, alpha_promote: float, n_opt: float
) -> tuple[BoolArray, BoolArray]:
    """Return (proven beyond +-kill_at, proven within +-margin), each side at half a level."""
    if not isinstance(stats, MeanStats | TwoMeans):
        raise TypeError(f"a two-sided rule needs means, not {type(stats).__name__}")

    def interval(alpha: float) -> Interval:
        if isinstance(stats, MeanStats):
            return mean_interval(stats, alpha_lower=alpha, alpha_upper=alpha, n_opt=n_opt)
        return two_mean_interval(stats, alpha_lower=alpha, alpha_upper=alpha, n_opt=n_opt)

    kill, near = interval(alpha_kill / 2), interval(alpha_promote / 2)
    lo, hi = np.asarray(kill.lower), np.asarray(kill.upper)
    harmful = (lo > rule.kill_at) | (hi < -rule.kill_at)
    inside = (np.asarray(near.upper) < rule.margin) & (np.asarray(near.lower) > -rule.margin)
    return harmful, inside
