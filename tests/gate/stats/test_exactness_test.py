"""The per-token exactness test on summed bin shares (`gate.stats.exactness`)."""

from __future__ import annotations

import numpy as np

from gate.exactness_fit import BINS
from gate.stats.exactness import TokenBins, deviation, explain, harmful, inside


def bins(n: float, skew: float = 0.0) -> TokenBins:
    # Shares tilted towards the likely tokens (low u) by `skew` of total variation.
    tilt = np.linspace(1.0, -1.0, BINS)
    shares = n / BINS * (1.0 + 2.0 * skew * tilt)
    return TokenBins(float(n), 0.0, tuple(shares))


def test_even_bins_are_not_harmful_and_are_proven_inside_with_enough_tokens():
    assert not harmful(bins(100_000), 0.005, 0.01)
    assert inside(bins(100_000), 0.01, 0.025)
    assert not inside(bins(200), 0.01, 0.025)  # too few tokens to prove anything


def test_a_shift_beyond_the_margin_is_proven_and_one_within_it_is_not():
    assert harmful(bins(50_000, skew=0.04), 0.005, 0.01)
    assert not harmful(bins(50_000, skew=0.003), 0.005, 0.01)


def test_impossible_tokens_beyond_the_margin_kill_on_their_own():
    even = bins(20_000)
    assert harmful(TokenBins(even.n, 400.0, even.bins), 0.005, 0.01)
    assert not harmful(TokenBins(even.n, 20.0, even.bins), 0.005, 0.01)


def test_the_deviation_names_the_shift_and_bounds_it():
    got = deviation(bins(50_000, skew=0.05), 0.01)
    est, lo, hi = (float(v) for v in (got.interval.estimate, got.interval.lower,
                                     got.interval.upper))  # fmt: skip
    assert 0.0 < lo < est < hi
    assert bool(got.more) and float(got.first) == 0.0  # more tokens at the likely end
    assert "per-token TV ≈" in explain(est, lo, hi)


def test_the_test_runs_over_looks_at_once():
    looks = TokenBins(np.array([100.0, 50_000.0]), np.zeros(2),
                      tuple(np.array([100.0, 50_000.0]) / BINS * (1 + 0.08 * t)
                            for t in np.linspace(1, -1, BINS)))  # fmt: skip
    assert harmful(looks, 0.005, 0.01).tolist() == [False, True]


def test_no_tokens_is_neither_harmful_nor_a_blocker():
    assert not harmful(TokenBins.empty(), 0.005, 0.01)
    assert inside(TokenBins.empty(), 0.01, 0.025)


def test_mass_moved_to_the_most_likely_tokens_is_proven_where_the_bins_cannot_see_it():
    # Even bins (no set deviates), but the most likely outcome came up 1,600 times where
    # its chances summed to 1,300 of 2,000 tokens: 0.15 of total variation per token.
    even = bins(2_000)
    seeking = TokenBins(even.n, 0.0, even.bins, off=400.0, off_p=700.0)
    assert harmful(seeking, 0.005, 0.01)
    got = deviation(seeking, 0.01)
    est, lo, hi = (float(v) for v in (got.interval.estimate, got.interval.lower,
                                     got.interval.upper))  # fmt: skip
    assert 0.0 < lo < est == 0.15 < hi and bool(got.more)
    # Away from the most likely, as plainly; and as the chances say: nothing proven.
    assert harmful(TokenBins(even.n, 0.0, even.bins, off=1_000.0, off_p=700.0), 0.005, 0.01)
    assert not harmful(TokenBins(even.n, 0.0, even.bins, off=700.0, off_p=700.0), 0.005, 0.01)


def test_the_most_likely_test_keeps_its_level_for_an_exact_sampler_at_every_look():
    # Exact draws: each token is its position's most likely with chance 1 - q, the q
    # spread from near-certain copies to open choices. A kill at any of the looks, at
    # level 0.05, in fewer than 5 % of 4,000 runs (the bins play no part: kept even).
    rng = np.random.default_rng(11)
    runs, tokens = 4_000, 3_000
    q = rng.beta(0.3, 1.5, (runs, tokens))
    z = rng.random((runs, tokens)) < q
    looks = np.arange(100, tokens + 1, 100)
    off, off_p = np.cumsum(z, axis=1)[:, looks - 1], np.cumsum(q, axis=1)[:, looks - 1]
    n = np.broadcast_to(looks.astype(float), off.shape)
    even = tuple(n / BINS for _ in range(BINS))
    killed = harmful(TokenBins(n, np.zeros_like(n), even, off, off_p), 0.0005, 0.05)
    assert killed.any(axis=1).mean() < 0.05


def test_the_most_likely_test_uses_the_bernoulli_variance_when_the_squares_are_stored():
    # Half the positions open (q = 0.9), half near-certain copies (q = 0.02): a Poisson
    # bound takes each token's variance as q, a Bernoulli's is q (1 - q), a tenth of it
    # at the open ones. A shift of 0.035 per token over 2,000 tokens is proven only with
    # the squares (`off_p2`); without them, as before.
    n, r, s = 2_000.0, 1_000 * 0.9 + 1_000 * 0.02, 1_000 * 0.81 + 1_000 * 0.02**2
    even = bins(n).bins
    for off in (r - n * 0.035, r + n * 0.035):  # towards and away from the most likely
        assert harmful(TokenBins(n, 0.0, even, off, r, s), 0.005, 0.01)
        assert not harmful(TokenBins(n, 0.0, even, off, r), 0.005, 0.01)


def test_the_most_likely_test_keeps_its_level_with_the_squares_at_every_look():
    # As above, with `off_p2` stored and chances spread to both ends (many open choices,
    # where the Bernoulli variance is far below the Poisson one), at no margin.
    rng = np.random.default_rng(12)
    runs, tokens = 4_000, 3_000
    q = 0.95 * rng.beta(0.4, 0.4, (runs, tokens))
    z = rng.random((runs, tokens)) < q
    looks = np.arange(100, tokens + 1, 100)
    sums = [np.cumsum(v, axis=1)[:, looks - 1] for v in (z, q, q**2)]
    n = np.broadcast_to(looks.astype(float), sums[0].shape)
    even = tuple(n / BINS for _ in range(BINS))
    killed = harmful(TokenBins(n, np.zeros_like(n), even, *sums), 0.0, 0.05)
    assert killed.any(axis=1).mean() < 0.05
