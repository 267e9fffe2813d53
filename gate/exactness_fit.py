"""A call's stored exactness statistics: the per-token bin sums and how they are read back.

Each tested token owns an interval of [0, 1] (its randomised probability integral
transform, `gate.exactness_position`); `occupancy` spreads that interval over `BINS` equal
bins, and `TokenFit` holds a call's sums of those shares with its counts of cut and
skipped positions and the most-likely test's sums. These are the only numbers stored
(`generations.exactness`, the replay side's `exactness`): `TokenFit.as_dict` writes them
and `TokenFit.from_dict` checks them on the way back in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BINS = 20


@dataclass(frozen=True)
class TokenFit:
    """One call's exactness statistics: sums over its tested tokens.

    `tokens` tested tokens, `bins` their fractional shares of each bin of [0, 1] (summing
    to `tokens`), `cut` tokens the settings make impossible, `skipped` positions whose
    distribution was not known well enough to test (and end-of-sequence tokens).
    """

    tokens: int
    bins: tuple[float, ...]
    cut: int = 0
    skipped: int = 0
    # Of the tested tokens, how many were NOT their position's most likely outcome (the
    # first of the order), and the sum of each one's chance not to be (its expectation
    # under an exact sampler): the most-likely test's sums (`gate.stats.exactness`).
    # Absent (stored before them): 0 and 0, which leaves that test's capital as it was.
    off: int = 0
    off_p: float = 0.0
    # The sum of the squares of those chances: the most-likely test's variance term (a
    # Bernoulli's q (1 - q) rather than a Poisson's q). Absent: 0, the Poisson bound.
    off_p2: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Return the stored fields (`generations.exactness`, the replay side's `exactness`)."""
        return {
            "n": self.tokens,
            "cut": self.cut,
            "skipped": self.skipped,
            "bins": [round(b, 9) for b in self.bins],
            "off": self.off,
            "off_p": round(self.off_p, 9),
            "off_p2": round(self.off_p2, 9),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TokenFit:
        """Return the statistics from their stored fields; ValueError when malformed:
        counts that are not whole and nonnegative, bins that are not `BINS` finite
        nonnegative shares summing to the tested tokens (what the test's bound needs)."""
        bins = raw.get("bins")
        if not isinstance(bins, list) or len(bins) != BINS:
            raise ValueError(f"exactness.bins must be a list of {BINS} numbers")
        counts = [raw.get("n"), raw.get("cut", 0), raw.get("skipped", 0)]
        if not all(type(c) is int and c >= 0 for c in counts):
            raise ValueError("exactness n, cut and skipped must be whole numbers >= 0")
        shares = tuple(_share(b) for b in bins)
        if abs(sum(shares) - counts[0]) > _SLACK * max(1, counts[0]):
            raise ValueError("exactness.bins must sum to n")
        off, off_p = raw.get("off", 0), raw.get("off_p", 0)
        if type(off) is not int or not 0 <= off <= counts[0]:
            raise ValueError("exactness.off must be a whole number from 0 to n")
        try:
            off_p = _share(off_p)
        except ValueError:
            raise ValueError("exactness.off_p must be a number from 0 to n") from None
        if off_p > counts[0] + _SLACK * max(1, counts[0]):
            raise ValueError("exactness.off_p must be a number from 0 to n")
        off_p = min(off_p, float(counts[0]))
        try:
            off_p2 = _share(raw.get("off_p2", 0))
        except ValueError:
            raise ValueError("exactness.off_p2 must be a number from 0 to off_p") from None
        if off_p2 > off_p + _SLACK * max(1, counts[0]):  # each square is at most its chance
            raise ValueError("exactness.off_p2 must be a number from 0 to off_p")
        return cls(counts[0], shares, counts[1], counts[2], off, off_p, min(off_p2, off_p))


# Rounding the stored shares (9 decimals) moves them and their sum by less than this.
_SLACK = 1e-6


def _share(value: Any) -> float:
    """Return a stored bin share; ValueError unless a finite number >= 0 (to rounding)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < -_SLACK:
        raise ValueError("exactness.bins must be finite numbers >= 0")
    return max(float(value), 0.0)


def occupancy(lo: float, hi: float) -> list[float]:
    """Return the share of the interval [lo, hi] of [0, 1] in each of `BINS` equal bins."""
    lo, hi = max(0.0, min(lo, 1.0)), max(0.0, min(hi, 1.0))
    shares = [0.0] * BINS
    width = hi - lo
    if width <= 1e-15:
        shares[min(int(lo * BINS), BINS - 1)] = 1.0
        return shares
    first, last = int(lo * BINS), min(int(hi * BINS), BINS - 1)
    for b in range(first, last + 1):
        overlap = min(hi, (b + 1) / BINS) - max(lo, b / BINS)
        shares[b] = max(0.0, overlap) / width
    return shares
