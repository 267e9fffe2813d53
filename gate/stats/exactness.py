"""The per-token exactness test: is the candidate's every token a draw from the target?

Each tested token contributes its fractional shares of `BINS` equal bins of [0, 1] (its
probability-integral-transform interval, `gate.exactness`). Under an exact sampler the
expected share of any union A of bins is |A| given the past, whatever the past was; so
for each interval of bins A and each direction, the mixture of constant bets of
`gate.stats.betting` on the shares against |A| is a test supermartingale (the shares of a
token lie in [0, 1], and log(1 + lam (x - m)) is concave in x, so the capital from
the summed shares is a lower bound of the capital from the tokens one by one: exact from
sums alone). Tokens within an answer need no independence: only the conditional
expectation given the past enters.

The most-likely test: a tested token is not its position's most likely outcome with the
chance q its position gives (`off`, `off_p`, `off_p2` sum the events, the chances and their
squares). A sampler that moves mass towards the most likely token moves that event's
chance by its per-token total variation, wherever each position's most likely token lies
in [0, 1], which no fixed bin set does; bets on the sums are test supermartingales whose
variance term is a Bernoulli's q (1 - q), not a Poisson's q (`_first_log_capitals`). It
takes `FIRST_SHARE` of the level, the bin sets and the cut rate the rest.

The null is "per-token total variation at most `margin`" (real engines are exact only up
to numerics): a token whose sampling distribution is within total variation d of the
reported one moves any set's expected share by at most d, so each test bets against
|A| +- margin (the most-likely test against q +- margin per token). A token the settings
cut (`cut`) is impossible under an exact sampler; its rate is tested against `margin` too.
Each direction of the most-likely test takes half of `FIRST_SHARE` of the level; every
set, direction and the cut rate an equal share of the rest (a union bound), so the whole
test errs with probability at most alpha at any number of looks.

What a proven shift means: the tokens' mean per-token total variation is at least the
proven deviation of the most deviant set (each token's TV bounds its own set deviation,
and the mean of those bounds the pooled one). It is a lower bound: deviations of
different positions can cancel in the pooled bins, so the test cannot see every lossy
sampler; it sees those that move mass towards or away from the likely tokens, as the
sampling bugs of public reports do.

Promotion: every set's deviation is proven within +- `promote_tv`, each test at the whole
promotion level (an intersection-union test), or there is no data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gate.exactness_fit import BINS
from gate.stats.betting import bet_bound, bet_rejects
from gate.stats.sequences import BoolArray, FloatArray, Interval, Num, as_array

# Every interval of consecutive bins but the whole of [0, 1]: (first bin, end bin).
SETS: tuple[tuple[int, int], ...] = tuple(
    (i, j) for i in range(BINS) for j in range(i + 1, BINS + 1) if (i, j) != (0, BINS)
)
# Tests that share the bins' half of the level: two directions per set, and the cut rate.
TESTS = 2 * len(SETS) + 1
# The most-likely test's bets: Poisson-style, lam in a geometric grid (a rate ratio e^-lam
# to e^lam away from the target's), mixed with equal weights.
FIRST_BETS: FloatArray = 0.02 * 1.6 ** np.arange(12, dtype=np.float64)
# The level's share of the most-likely test (each direction half of it); the bin sets,
# the cut rate and their union share the rest.
FIRST_SHARE = 0.5


@dataclass(frozen=True, eq=False)
class TokenBins:
    """Summed exactness statistics of some calls.

    `n` tested tokens, `cut` impossible tokens, `bins` the fractional shares, one value
    (or array, broadcasting with `n` over runs and looks) per bin: a tuple, so that every
    generic helper that indexes or adds cells field by field treats each bin as a cell's
    number.
    """

    n: Num
    cut: Num
    bins: tuple[Num, ...]
    # Tested tokens that were not their position's most likely outcome, and the sum of
    # their chances not to be (`gate.exactness_fit.TokenFit.off`, `off_p`).
    off: Num = 0.0
    off_p: Num = 0.0
    # The sum of the squares of those chances (`TokenFit.off_p2`; 0 when not stored).
    off_p2: Num = 0.0

    @classmethod
    def empty(cls) -> TokenBins:
        """Return the statistics of no calls."""
        return cls(0.0, 0.0, (0.0,) * BINS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TokenBins):
            return NotImplemented
        mine = (self.n, self.cut, *self.bins, self.off, self.off_p, self.off_p2)
        theirs = (other.n, other.cut, *other.bins, other.off, other.off_p, other.off_p2)
        return all(np.array_equal(a, b) for a, b in zip(mine, theirs, strict=True))

    def __hash__(self) -> int:
        return hash((float(np.sum(self.n)), float(np.sum(self.cut))))


def _set_counts(stats: TokenBins) -> tuple[FloatArray, FloatArray]:
    """Return each set's summed shares (first axis: `SETS`) and the token counts."""
    bins = np.stack(np.broadcast_arrays(*(as_array(b) for b in stats.bins))).astype(np.float64)
    cum = np.concatenate([np.zeros((1, *bins.shape[1:])), np.cumsum(bins, axis=0)], axis=0)
    first = np.asarray([i for i, _ in SETS])
    end = np.asarray([j for _, j in SETS])
    n = np.broadcast_to(as_array(stats.n), bins.shape[1:])
    return cum[end] - cum[first], np.asarray(n, dtype=np.float64)


def _widths() -> FloatArray:
    return np.asarray([(j - i) / BINS for i, j in SETS], dtype=np.float64)


def harmful(stats: TokenBins, margin: float, alpha: float) -> BoolArray:
    """Return whether a deviation beyond `margin` is proven, at total level `alpha`."""
    each = FIRST_SHARE * alpha / 2.0
    first = _first_rejects(stats, margin, each, toward=True)
    first = first | _first_rejects(stats, margin, each, toward=False)
    rest = (1.0 - FIRST_SHARE) * alpha / TESTS
    return np.asarray(first | _any_set(stats, margin, rest, beyond=True))


def _first_log_capitals(stats: TokenBins, margin: Num, *, toward: bool) -> FloatArray:
    """Return the most-likely test's log capital per bet (last axis: `FIRST_BETS`).

    A tested token is not its position's most likely outcome (z = 1) with chance q under
    the target; a sampler within total variation `margin` of it gives chance p within q
    +- margin. With c = 1 - e^-lam and x = q - margin: E exp(-lam z) = 1 - c p <= exp(-c x
    - c^2 x^2 / 2) (log(1 - y) <= -y - y^2 / 2 for y in [0, 1); for x < 0 the right side
    is >= 1), so exp(-lam Z + c X + c^2 Q / 2) is a test supermartingale against mass moved
    `toward` the most likely, X and Q summing x and x^2. Away from it, with b = e^lam - 1
    and x = q + margin: log(1 + b p) <= b x - b^2 e^-lam x^2 / 2 (log(1 + y) <= y - y^2 /
    (2 (1 + y)), and the right side grows in x up to 1 / c, past 1 + margin for every bet
    where it is used). Q is computed from the sums Z (`off`), R (`off_p`), S (`off_p2`)
    and n, and replaced by a lower bound (S absent or partial counts as less, and Q >=
    X^2 / n always): a smaller Q only lowers the capital, so the test stays exact.
    """
    n, z, r, s = (as_array(v)[..., None] for v in (stats.n, stats.off, stats.off_p, stats.off_p2))
    margin = as_array(margin)[..., None]
    lam = FIRST_BETS
    sign = -1.0 if toward else 1.0
    x = r + sign * n * margin  # the summed x
    q2 = np.maximum(s + 2.0 * sign * margin * r + n * margin**2, x**2 / np.maximum(n, 1.0))
    if toward:
        c = -np.expm1(-lam)
        return np.asarray(-lam * z + c * x + 0.5 * c**2 * q2)
    b = np.expm1(lam)
    usable = -np.expm1(-lam) * (1.0 + margin) <= 1.0
    return np.asarray(lam * z - b * x + np.where(usable, 0.5 * b**2 * np.exp(-lam), 0.0) * q2)


def _first_rejects(stats: TokenBins, margin: float, alpha: float, *, toward: bool) -> BoolArray:
    """Return whether the most-likely test's mixture capital reached 1 / alpha."""
    capitals = _first_log_capitals(stats, margin, toward=toward)
    top = capitals.max(axis=-1)
    mean = top + np.log(np.exp(capitals - top[..., None]).mean(axis=-1))
    return np.asarray(mean >= np.log(1.0 / alpha))


def inside(stats: TokenBins, margin: float, alpha: float) -> BoolArray:
    """Return whether every set's deviation is proven within `margin` (or no tokens)."""
    # Promotion needs every test to reject: an intersection-union test (Berger 1982), so
    # each at the whole level already bounds a false promotion by it; splitting the level
    # as the kill's union does would only delay promotion (about 57,000 tokens against
    # 24,000 for perfectly even bins at promote_tv 0.01).
    within = ~_any_set(stats, margin, alpha, beyond=False)
    return np.asarray(within | (as_array(stats.n) + as_array(stats.cut) <= 0))


def _any_set(stats: TokenBins, margin: float, each: float, *, beyond: bool) -> BoolArray:
    """Return whether some set's share is proven beyond width +- margin (`beyond`), or
    some set's is NOT proven within it (not `beyond`), each test at level `each`."""
    shares, n = _set_counts(stats)
    cut = (
        _cut_proven(stats, margin, each, above=True)
        if beyond
        else ~_cut_proven(stats, margin, each, above=False)
    )
    out = np.asarray(cut)
    for s, width in enumerate(_widths()):
        counts = _counts(n, shares[s])
        for m, above in ((width + margin, True), (width - margin, False)):
            if 0.0 < m < 1.0:
                # Beyond: proven past m; within: proven on the near side of m.
                proven = bet_rejects([0.0, 1.0], counts, m, each, above=above == beyond)
                out = out | (proven if beyond else ~proven)
    return np.asarray(out)


def _counts(n: FloatArray, share: FloatArray) -> list[Num]:
    share = np.clip(share, 0.0, np.maximum(n, 0.0))
    return [np.maximum(n - share, 0.0), share]


def _cut_proven(stats: TokenBins, margin: float, alpha: float, *, above: bool) -> BoolArray:
    """Return whether the impossible tokens' rate is proven above (below) `margin`."""
    total = as_array(stats.n) + as_array(stats.cut)
    if not 0.0 < margin < 1.0:  # nothing to prove beyond; within, nothing left to prove
        return np.full(np.shape(total), not above, dtype=bool)
    counts = _counts(total, as_array(stats.cut))
    return bet_rejects([0.0, 1.0], counts, margin, alpha, above=above)


@dataclass(frozen=True)
class Deviation:
    """The most deviant set and its deviation's interval (the verdict's words)."""

    interval: Interval  # |share - width| of that set: estimate, lower, upper
    first: FloatArray  # the set's bins, as [first / BINS, end / BINS] of [0, 1]
    end: FloatArray
    more: BoolArray  # tokens fall there more often than the target gives them


def deviation(stats: TokenBins, alpha: float) -> Deviation:
    """Return the most deviant set (by z-score) with its deviation's interval.

    Args:
        stats: the summed statistics (leading axes broadcast).
        alpha: the total level; each bound uses this test's share (alpha / `TESTS`).

    Returns:
        The lower bound on the mean per-token total variation that the set shows, its
        estimate and upper end, where the set lies, and which way it moved.
    """
    shares, n = _set_counts(stats)
    widths = _widths().reshape(-1, *([1] * n.ndim))
    safe = np.maximum(n, 1.0)
    dev = shares / safe - widths
    z = np.abs(dev) / np.sqrt(widths * (1.0 - widths) / safe)
    best = np.argmax(z, axis=0)
    pick = np.take_along_axis(shares, best[None, ...], axis=0)[0]
    width = _widths()[best]
    each = (1.0 - FIRST_SHARE) * alpha / TESTS
    counts = _counts(n, pick)
    lower = bet_bound([0.0, 1.0], counts, each, lower=True) - width
    upper = bet_bound([0.0, 1.0], counts, each, lower=False) - width
    estimate = np.where(n > 0, pick / np.maximum(n, 1.0) - width, np.nan)
    more = estimate > 0
    low = np.where(more, np.maximum(lower, 0.0), np.maximum(-upper, 0.0))
    high = np.where(more, upper, -lower)
    first = np.asarray([i for i, _ in SETS])[best] / BINS
    end = np.asarray([j for _, j in SETS])[best] / BINS
    f_est, f_low, f_high = _first_interval(stats, FIRST_SHARE * alpha / 2.0)
    # The most-likely test speaks where its lower bound is higher (an empty set [0, 0]).
    use = (f_low > low) | ((f_low == low) & (f_est > np.abs(np.nan_to_num(estimate))))
    use = use & (n > 0)
    return Deviation(
        Interval(
            np.where(use, f_est, np.abs(estimate)),
            np.where(use, f_low, low),
            np.where(use, f_high, high),
        ),
        np.where(use, 0.0, first),
        np.where(use, 0.0, end),
        np.where(use, f_est > 0, more),
    )


def _first_interval(stats: TokenBins, alpha: float) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Return the most-likely test's shift per token: |estimate|, lower and upper bounds.

    The shift is the mean over tokens of (chance to be the most likely) minus the target's,
    a lower bound of the mean per-token total variation. Each bound inverts one bet of
    `FIRST_BETS` at alpha / their number (the mixture rejects whenever one bet does so).
    """
    n, z, r = (as_array(v)[..., None] for v in (stats.n, stats.off, stats.off_p))
    lam, safe = FIRST_BETS, np.maximum(n, 1.0)
    log_g = np.log(FIRST_BETS.size / alpha)
    gain, loss = 1.0 - np.exp(-lam), np.expm1(lam)
    toward = (r - z) >= 0
    # Toward the most likely: shift d = mean(q - z's chance) >= 0.
    lo_t = ((r - (lam * z + log_g) / gain) / safe).max(axis=-1)
    hi_t = ((r - (lam * z - log_g) / loss) / safe).min(axis=-1)
    # Away from it: d = mean(z's chance - q) >= 0.
    lo_a = (((lam * z - log_g) / loss - r) / safe).max(axis=-1)
    hi_a = (((lam * z + log_g) / gain - r) / safe).min(axis=-1)
    estimate = np.abs(r - z)[..., 0] / safe[..., 0]
    low = np.maximum(np.where(toward[..., 0], lo_t, lo_a), 0.0)
    # The lower bound as the test proves it (with the squares' variance term): the
    # largest margin at which one bet still rejects, by bisection.
    low = np.maximum(low, _first_proven(stats, alpha / FIRST_BETS.size, toward[..., 0]))
    high = np.clip(np.where(toward[..., 0], hi_t, hi_a), 0.0, 1.0)
    return (
        np.where(n[..., 0] > 0, estimate, np.nan),
        np.asarray(low),
        np.asarray(np.maximum(high, low)),
    )


def _first_proven(stats: TokenBins, alpha: float, toward: BoolArray) -> FloatArray:
    """Return the largest margin that one most-likely bet rejects at `alpha` (0: none)."""
    lo = np.zeros(np.shape(as_array(stats.n)))
    hi = np.ones_like(lo)
    for _ in range(30):
        mid = (lo + hi) / 2.0
        capitals = np.where(
            toward[..., None],
            _first_log_capitals(stats, mid, toward=True),
            _first_log_capitals(stats, mid, toward=False),
        )
        proven = capitals.max(axis=-1) >= np.log(1.0 / alpha)
        lo, hi = np.where(proven, mid, lo), np.where(proven, hi, mid)
    return np.asarray(lo)


def explain(estimate: float, lower: float, upper: float) -> str:
    """Return the verdict's sentence for a proven deviation."""
    return (
        "the candidate's tokens are not distributed as the target's: per-token TV "
        f"≈ {estimate:.3f} [{lower:.3f}, {upper:.3f}]"
    )
