"""Confidence sequences: golden numbers, degenerate inputs and time-uniform coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gate.stats.betting import (
    below,
    bet_log_wealth,
    diff_interval,
    exceeds,
    proportion_interval,
    two_proportion_interval,
)
from gate.stats.sequences import (
    MIN_N,
    CohortCounts,
    CountStats,
    MeanStats,
    PairedCounts,
    TwoCounts,
    TwoMeans,
    mean_interval,
    mixture_multiplier,
    two_mean_interval,
)


def test_mixture_multiplier_golden():
    # By hand: alpha = 0.05, n_opt = 100 -> rho^2 = (5.99146 + ln 6.99146) / 100 = 0.0793615;
    # x = 7.93615; z^2 / 2 = ln 10 + ln(8.93615) / 2 - ln Phi(z) -> z = 2.60852 after three
    # fixed-point steps; multiplier = z sqrt(8.93615 / 7.93615) = 2.76799.
    assert float(mixture_multiplier(100.0, 0.05, 100.0)) == pytest.approx(2.76799, abs=1e-5)
    # Away from n_opt the boundary is wider, and it widens slowly (log) at large n.
    wide = mixture_multiplier(np.array([10.0, 100.0, 10_000.0]), 0.05, 100.0)
    assert wide[0] > wide[1] < wide[2] < 3.5


def test_mean_interval_golden():
    # mean 0.05, sample variance 0.04 over 100 values: SE 0.02, radius 0.02 * 2.76799.
    stats = MeanStats(n=100, total=5.0, total_sq=99 * 0.04 + 100 * 0.05**2)
    got = mean_interval(stats, alpha_lower=0.05, alpha_upper=0.05, n_opt=100)
    assert float(got.estimate) == pytest.approx(0.05)
    assert float(got.lower) == pytest.approx(0.05 - 0.0553598, abs=1e-6)
    assert float(got.upper) == pytest.approx(0.05 + 0.0553598, abs=1e-6)


def test_mean_interval_degenerate_inputs_get_explicit_defaults():
    empty = mean_interval(MeanStats(0, 0.0, 0.0), alpha_lower=0.05, alpha_upper=0.05, n_opt=10)
    assert math.isnan(float(empty.estimate))
    assert (float(empty.lower), float(empty.upper)) == (-math.inf, math.inf)
    few = mean_interval(
        MeanStats(MIN_N - 1, 1.0, 1.0), alpha_lower=0.05, alpha_upper=0.05, n_opt=10
    )
    assert (float(few.lower), float(few.upper)) == (-math.inf, math.inf)
    # Every value identical: a point interval at that value.
    same = mean_interval(MeanStats(50, 10.0, 2.0), alpha_lower=0.05, alpha_upper=0.05, n_opt=10)
    assert float(same.lower) == pytest.approx(0.2) == float(same.upper)


def test_two_mean_interval_uses_the_standard_error_of_a_difference():
    base = MeanStats(n=200, total=0.0, total_sq=199 * 0.25)
    cand = MeanStats(n=200, total=20.0, total_sq=199 * 0.25 + 200 * 0.01)
    got = two_mean_interval(TwoMeans(base, cand), alpha_lower=0.05, alpha_upper=0.05, n_opt=400)
    se = math.sqrt(0.25 / 200 + 0.25 / 200)
    radius = se * float(mixture_multiplier(400.0, 0.05, 400.0))
    assert float(got.estimate) == pytest.approx(0.1)
    assert float(got.upper) - 0.1 == pytest.approx(radius, rel=1e-9)


def test_bet_log_wealth_golden():
    # Three candidate-only failures in ten pairs, null mean 0: every tie leaves capital
    # alone and each +1 multiplies bet g's capital by 1 + f_g, f_g = 0.95 / 1.5^g.
    # By hand: ln(mean_g (1 + f_g)^3) = ln(26.49...) / ... = 0.795090.
    got = bet_log_wealth([-1.0, 0.0, 1.0], [0.0, 7.0, 3.0], 0.0, above=True)
    assert float(got) == pytest.approx(0.7950901, abs=1e-6)
    # Betting the other way loses on every +1: capital below 1.
    assert float(bet_log_wealth([-1.0, 0.0, 1.0], [0.0, 7.0, 3.0], 0.0, above=False)) < 0


def test_paired_interval_brackets_the_estimate_and_matches_the_tests():
    stats = PairedCounts(n=3000, worse=150, better=60)
    got = diff_interval(stats, alpha_lower=0.001, alpha_upper=0.025)
    assert float(got.estimate) == pytest.approx(0.03)
    assert 0.0 < float(got.lower) < 0.03 < float(got.upper) < 0.06
    assert bool(exceeds(stats, float(got.lower) - 1e-6, 0.001))
    assert not bool(exceeds(stats, float(got.lower) + 1e-6, 0.001))
    assert bool(below(stats, float(got.upper) + 1e-6, 0.025))
    assert not bool(below(stats, float(got.upper) - 1e-6, 0.025))


def test_paired_interval_degenerate_inputs():
    empty = diff_interval(PairedCounts(0, 0, 0), alpha_lower=0.05, alpha_upper=0.05)
    assert math.isnan(float(empty.estimate))
    assert (float(empty.lower), float(empty.upper)) == pytest.approx((-1.0, 1.0))
    # All ties: zero variance, and the interval still has honest width at small n.
    ties = diff_interval(PairedCounts(10, 0, 0), alpha_lower=0.05, alpha_upper=0.05)
    assert float(ties.lower) < -0.2 and float(ties.upper) > 0.2


def test_proportion_and_two_proportion_intervals():
    one = proportion_interval(CountStats(n=1000, k=100), alpha_lower=0.05, alpha_upper=0.05)
    assert 0.07 < float(one.lower) < 0.1 < float(one.upper) < 0.135
    two = two_proportion_interval(
        TwoCounts(CountStats(1000, 100), CountStats(1000, 100)),
        alpha_lower=0.05,
        alpha_upper=0.05,
    )
    assert float(two.estimate) == 0.0
    assert float(two.lower) < -0.03 and float(two.upper) > 0.03
    empty = proportion_interval(CountStats(0, 0), alpha_lower=0.05, alpha_upper=0.05)
    assert (float(empty.lower), float(empty.upper)) == pytest.approx((0.0, 1.0))


def test_cohort_counts_use_inverse_propensity_pseudo_outcomes():
    # 1,000 requests, candidate share 0.25: 40 candidate and 90 baseline bad outcomes.
    # By hand: estimate (40 / 0.25 - 90 / 0.75) / 1000 = (160 - 120) / 1000 = 0.04.
    stats = CohortCounts(n=1000, candidate=40, baseline=90, share=0.25)
    got = diff_interval(stats, alpha_lower=0.05, alpha_upper=0.05)
    assert float(got.estimate) == pytest.approx(0.04)
    assert float(got.lower) < 0.04 < float(got.upper)
    assert bool(exceeds(stats, float(got.lower) - 1e-6, 0.05))
    assert bool(below(stats, float(got.upper) + 1e-6, 0.05))


def test_cohort_sequence_covers_under_random_assignment():
    # 1,000 canaries of 4,000 requests, share 0.3, bad rate 0.15 in both cohorts; looked
    # at every 20 requests: the lower bound at alpha = 0.05 may pass 0 on <= 5%.
    rng = np.random.default_rng(5)
    cand = rng.random((1000, 4000)) < 0.3
    bad = rng.random((1000, 4000)) < 0.15
    looks = slice(19, None, 20)
    n = np.arange(1, 4001, dtype=float)[looks]
    stats = CohortCounts(
        n, np.cumsum(cand & bad, 1)[:, looks] * 1.0, np.cumsum(~cand & bad, 1)[:, looks] * 1.0, 0.3
    )
    assert exceeds(stats, 0.0, 0.05).any(axis=1).mean() <= 0.05


def test_betting_sequence_covers_uniformly_over_time():
    # 1,000 paths of 3,000 pairs, P(+1) = 0.04, P(-1) = 0.02 (true mean 0.02), looked at
    # after every 10 pairs; the lower bound at alpha = 0.05 may exceed 0.02 on <= 5%.
    rng = np.random.default_rng(7)
    draws = rng.choice([-1, 0, 1], p=[0.02, 0.94, 0.04], size=(1000, 3000))
    worse = np.cumsum(draws == 1, axis=1)[:, 9::10].astype(float)
    better = np.cumsum(draws == -1, axis=1)[:, 9::10].astype(float)
    n = np.arange(10, 3001, 10, dtype=float)
    crossed = exceeds(PairedCounts(n, worse, better), 0.02, 0.05).any(axis=1)
    assert crossed.mean() <= 0.05


def test_asymptotic_sequence_covers_heavy_tails():
    # Student t with 3 degrees of freedom (finite variance, heavy tails), 1,000 paths of
    # 5,000 values, looked at after every 10; one-sided alpha = 0.05 plus three binomial
    # standard errors of slack, since the guarantee is asymptotic.
    rng = np.random.default_rng(11)
    x = rng.standard_t(3, size=(1000, 5000))
    n = np.arange(1, 5001, dtype=float)[9::10]
    stats = MeanStats(n, np.cumsum(x, 1)[:, 9::10], np.cumsum(x * x, 1)[:, 9::10])
    got = mean_interval(stats, alpha_lower=0.05, alpha_upper=0.05, n_opt=500)
    missed = (np.asarray(got.upper) < 0).any(axis=1)
    assert missed.mean() <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 1000)
