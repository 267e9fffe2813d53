"""What a rehearsal measured: percentiles per route, speedup with a bootstrap interval per
level and segment, the crossover where the candidate stops winning, and the exit decision.

Speedup is the baseline's end-to-end seconds per output token over the candidate's (> 1: the
candidate is faster), so answers of different lengths compare fairly and queueing counts.
The two routes never ran at once, so their requests are independent samples: the interval
resamples each route's requests on its own (percentile bootstrap, pointwise 95 %).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

import numpy as np

from gate.rehearse.runner import Sample

ALL = "all"
BOOTSTRAP = 2000
Call = Literal["wins", "loses", "unclear"]


class Decision(IntEnum):
    """The exit code of `specgate rehearse`."""

    PAYS = 0
    DOES_NOT_PAY = 1
    CANNOT_TELL = 2
    ERROR = 4


@dataclass(frozen=True)
class Speedup:
    """Baseline over candidate seconds per output token, with its interval."""

    estimate: float
    low: float
    high: float

    @property
    def call(self) -> Call:
        """Return "wins" or "loses" when the interval excludes 1, else "unclear"."""
        if self.low > 1:
            return "wins"
        return "loses" if self.high < 1 else "unclear"


@dataclass(frozen=True)
class Crossover:
    """Where the candidate stops winning: between `low` and `high`; None means unbounded."""

    low: int | None
    high: int | None
    text: str


def seconds_per_token(samples: list[Sample]) -> tuple[np.ndarray, np.ndarray]:
    """Return the successful samples' e2e seconds and output tokens."""
    ok = [s for s in samples if s.ok and s.tokens > 0]
    return np.array([s.e2e_s for s in ok]), np.array([s.tokens for s in ok], dtype=float)


def speedup(
    baseline: list[Sample], candidate: list[Sample], *, seed: int = 0, alpha: float = 0.05
) -> Speedup | None:
    """Return the speedup with a bootstrap interval, or None with under 2 samples a side.

    Args:
        baseline: the baseline route's samples (failures are ignored).
        candidate: the candidate route's samples.
        seed: the bootstrap's seed (the same data give the same interval).
        alpha: 1 - the interval's coverage.

    Returns:
        The estimate and its two-sided percentile interval.
    """
    (eb, tb), (ec, tc) = seconds_per_token(baseline), seconds_per_token(candidate)
    if len(eb) < 2 or len(ec) < 2:
        return None
    rng = np.random.default_rng(seed)
    ib = rng.integers(0, len(eb), (BOOTSTRAP, len(eb)))
    ic = rng.integers(0, len(ec), (BOOTSTRAP, len(ec)))
    ratios = (eb[ib].sum(1) / tb[ib].sum(1)) / (ec[ic].sum(1) / tc[ic].sum(1))
    low, high = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    estimate = (eb.sum() / tb.sum()) / (ec.sum() / tc.sum())
    return Speedup(float(estimate), float(low), float(high))


def precise(value: Speedup | None, precision: float) -> bool:
    """Return whether the interval's width is within `precision` of the estimate."""
    return value is not None and (value.high - value.low) <= precision * value.estimate


def crossover(levels: list[int], calls: list[Call | None]) -> Crossover:
    """Return where the candidate stops winning over the swept levels (ascending).

    As `decide` does, it assumes the gain does not grow with load: the lower end is the
    highest level where the candidate is proven to win, the upper end the first level
    above it where it is proven to lose.
    """
    won = [i for i, call in enumerate(calls) if call == "wins"]
    if won and won[-1] == len(levels) - 1:
        return Crossover(None, None, f"none within the sweep (wins at {levels[-1]})")
    after = won[-1] + 1 if won else 0
    lost = next((i for i in range(after, len(levels)) if calls[i] == "loses"), None)
    low = levels[won[-1]] if won else None
    high = levels[lost] if lost is not None else None
    if low is None and high is None:
        return Crossover(None, None, "could not tell (no level proven to win or to lose)")
    if low is None:
        return Crossover(None, high, f"at or below {high} (no level proven to win)")
    if high is None:
        return Crossover(low, None, f"above {low}; no level up to {levels[-1]} proven to lose")
    return Crossover(low, high, f"between {low} and {high}")


def decide(levels: list[int], calls: list[Call | None], at: int) -> Decision:
    """Decide whether speculation pays at concurrency `at`, assuming gain falls with load.

    It pays if it is proven to win at the nearest swept level at or above `at`; it does not
    if it is proven to lose at the nearest level at or below; otherwise, and for an `at`
    above the sweep, the sweep cannot tell.
    """
    if not levels or at > levels[-1]:
        return Decision.CANNOT_TELL  # what happens past the sweep was not measured
    above = [i for i, level in enumerate(levels) if level >= at]
    below = [i for i, level in enumerate(levels) if level <= at]
    if above and calls[above[0]] == "wins":
        return Decision.PAYS
    if below and calls[below[-1]] == "loses":
        return Decision.DOES_NOT_PAY
    return Decision.CANNOT_TELL


def percentiles(values: list[float], qs: tuple[int, ...] = (50, 90, 99)) -> dict[str, float]:
    """Return p50/p90/p99 (empty when there are no values)."""
    if not values:
        return {}
    found = np.percentile(np.array(values), qs)
    return {f"p{q}": round(float(v), 4) for q, v in zip(qs, found, strict=True)}
