"""What a rehearsal measured: percentiles per route, speedup with a bootstrap interval per
level and segment, the crossover where the candidate stops winning, and the exit decision.

Speedup is the baseline's end-to-end seconds per output token over the candidate's (> 1: the
candidate is faster), so answers of different lengths compare fairly and queueing counts.
Both routes replay the same requests at each level, so answers are paired by request and the
interval resamples pairs (percentile bootstrap, pointwise 95 %): the spread between prompts,
large in a mixed workload, then cancels out of the ratio.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

import numpy as np
import numpy.typing as npt

from gate.rehearse.runner import Sample

ALL = "all"
BOOTSTRAP = 2000
Call = Literal["wins", "loses", "unclear"]
FloatArray = npt.NDArray[np.float64]


class RehearsalAnswer(IntEnum):
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


def matched(baseline: list[Sample], candidate: list[Sample]) -> FloatArray:
    """Return (baseline s, baseline tokens, candidate s, candidate tokens) per matched pair.

    Both routes replay the same requests at a level, so each successful baseline answer is
    paired with one successful candidate answer to the same request (in arrival order); a
    request that failed or went unanswered on either side is left out.
    """
    queues: dict[str, list[Sample]] = defaultdict(list)
    for sample in candidate:
        if sample.ok and sample.tokens > 0:
            queues[sample.item].append(sample)
    rows = []
    for b in baseline:
        if b.ok and b.tokens > 0 and queues[b.item]:
            c = queues[b.item].pop(0)
            rows.append((b.e2e_s, b.tokens, c.e2e_s, c.tokens))
    return np.array(rows, dtype=float).reshape(-1, 4)


# 1 - a speedup interval's coverage: pointwise 95 %; a rehearsal of K arms gives each arm
# ALPHA / K (`gate.cli.rehearse`), so that no arm reads as paying by chance more often
# than a single candidate would.
ALPHA = 0.05


def speedup(
    baseline: list[Sample], candidate: list[Sample], *, seed: int = 0, alpha: float = ALPHA
) -> Speedup | None:
    """Return the speedup with a paired bootstrap interval, or None under 2 matched pairs.

    Args:
        baseline: the baseline route's samples (failures are ignored).
        candidate: the candidate route's samples, matched to the baseline's by request.
        seed: the bootstrap's seed (the same data give the same interval).
        alpha: 1 - the interval's coverage.

    Returns:
        The estimate (ratio of the two routes' seconds per token over the matched pairs)
        and its two-sided percentile interval, resampling pairs.
    """
    pairs = matched(baseline, candidate)
    if len(pairs) < 2:
        return None
    rng = np.random.default_rng(seed)
    sums = pairs[rng.integers(0, len(pairs), (BOOTSTRAP, len(pairs)))].sum(axis=1)
    ratios = (sums[:, 0] / sums[:, 1]) / (sums[:, 2] / sums[:, 3])
    low, high = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    total = pairs.sum(axis=0)
    estimate = (total[0] / total[1]) / (total[2] / total[3])
    return Speedup(float(estimate), float(low), float(high))


def level_call(
    baseline: list[Sample], candidate: list[Sample], *, alpha: float = ALPHA
) -> Call | None:
    """Return the level's call: its speedup's (interval at `alpha`), except that a candidate
    failing a larger share of its requests than the baseline does not win (the speedup
    leaves failures out, so it would be fast on the answers it gave); None under 2 matched
    pairs."""
    value = speedup(baseline, candidate, alpha=alpha)
    if value is None:
        return None
    if value.call == "wins" and fails_more(baseline, candidate):
        return "unclear"
    return value.call


def fails_more(baseline: list[Sample], candidate: list[Sample]) -> bool:
    """Return whether the candidate failed a larger share of its requests than the baseline:
    its speedup, over the answers it gave, then flatters it, so it neither wins a level nor
    leads other arms (`gate.rehearse.arms`)."""
    return _failed_share(candidate) > _failed_share(baseline)


def _failed_share(samples: list[Sample]) -> float:
    return sum(not s.ok for s in samples) / len(samples) if samples else 0.0


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


def decide(levels: list[int], calls: list[Call | None], at: int) -> RehearsalAnswer:
    """Decide whether speculation pays at concurrency `at`, assuming gain falls with load.

    It pays if it is proven to win at the nearest swept level at or above `at`; it does not
    if it is proven to lose at the nearest level at or below; otherwise, and for an `at`
    above the sweep, the sweep cannot tell.
    """
    if not levels or at > levels[-1]:
        return RehearsalAnswer.CANNOT_TELL  # what happens past the sweep was not measured
    above = [i for i, level in enumerate(levels) if level >= at]
    below = [i for i, level in enumerate(levels) if level <= at]
    if above and calls[above[0]] == "wins":
        return RehearsalAnswer.PAYS
    if below and calls[below[-1]] == "loses":
        return RehearsalAnswer.DOES_NOT_PAY
    return RehearsalAnswer.CANNOT_TELL


def percentiles(values: list[float], qs: tuple[int, ...] = (50, 90, 99)) -> dict[str, float]:
    """Return p50/p90/p99 (empty when there are no values)."""
    if not values:
        return {}
    found = np.percentile(np.array(values), qs)
    return {f"p{q}": round(float(v), 4) for q, v in zip(qs, found, strict=True)}


def confidence(alpha: float) -> str:
    """Return an interval's confidence level as people read it: 0.05 / 3 -> "98.3 %"."""
    return f"{100 * (1 - alpha):.3g} %"
