"""Fixed-sample 95% intervals for descriptive reading (the gate uses anytime-valid ones)."""

from __future__ import annotations

import math
from dataclasses import dataclass

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Proportion:
    """k successes out of n, with its Wilson score interval."""

    k: int
    n: int
    low: float
    high: float

    @property
    def rate(self) -> float | None:
        """Return k/n, or None when n is 0."""
        return self.k / self.n if self.n else None


@dataclass(frozen=True)
class Difference:
    """A difference of two independent proportions (a - b) with its interval."""

    estimate: float
    low: float
    high: float


def wilson(k: int, n: int, z: float = Z95) -> Proportion:
    """Return the Wilson score interval of k/n; (0, 1) when n is 0.

    Args:
        k: successes, 0 <= k <= n.
        n: trials.
        z: normal quantile of the two-sided level.
    Returns:
        The proportion with its interval.
    """
    if n <= 0:
        return Proportion(k=0, n=0, low=0.0, high=1.0)
    p = k / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # At k = 0 or k = n one bound is exactly 0 or 1; say so rather than round near it.
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return Proportion(k=k, n=n, low=low, high=high)


def newcombe(a: Proportion, b: Proportion) -> Difference | None:
    """Return Newcombe's hybrid score interval of a - b, or None when either is empty.

    Args:
        a: the first proportion (the candidate's, in reports).
        b: the second proportion (the baseline's).
    Returns:
        The difference and its interval (Newcombe 1998, method 10).
    """
    if a.rate is None or b.rate is None:
        return None
    d = a.rate - b.rate
    low = d - math.sqrt((a.rate - a.low) ** 2 + (b.high - b.rate) ** 2)
    high = d + math.sqrt((a.high - a.rate) ** 2 + (b.rate - b.low) ** 2)
    return Difference(estimate=d, low=low, high=high)
