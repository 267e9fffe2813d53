"""Recorded pairs as columns, and the accumulators every cell builder shares.

`PairColumns` holds pairs as arrays with leading axes (runs, pairs) or (pairs,); `Context`
is what a guardrail's cell builder reads from them; `Acc` takes cumulative sums per segment
at the looks, and `mean` and the `Builder`s turn masked columns into one cell's statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gate.stats.gate_stats import CellStats
from gate.stats.policy import Policy
from gate.stats.sequences import (
    LOG_RATIO_CLIP,
    BoolArray,
    EpisodeMean,
    FloatArray,
    IntArray,
    MeanStats,
    TwoMeans,
)

BASE, CAND = 0, 1


@dataclass(frozen=True)
class PairColumns:
    """Pairs as arrays; a trailing axis of 2 is (baseline, candidate).

    Latencies are NaN where a side has none; `failed` marks error/timeout/fallback;
    `evals` hold 1 for fail, 0 for pass, NaN for not scored; `acceptance` is the
    candidate's accepted/draft tokens (NaN without drafts); `feedback` 1 for thumbs-down,
    0 for other ratings, NaN for none; `mismatch` the greedy-parity failure of the pair's
    second side (NaN when not a greedy pair). Control pairs (baseline vs baseline) feed
    only the greedy control rate. `dropped` pairs were never completed or are not
    attributable; `cancelled` marks sides the client gave up on (such a pair is dropped
    too; None: no cancels), read only by the canary cancel rate.
    """

    segment: IntArray
    created_s: FloatArray
    is_control: BoolArray
    dropped: BoolArray
    ttft: FloatArray
    tpot: FloatArray
    e2e: FloatArray
    failed: BoolArray
    acceptance: FloatArray
    evals: dict[str, FloatArray] = field(default_factory=dict)
    feedback: FloatArray | None = None
    mismatch: FloatArray | None = None
    cancelled: BoolArray | None = None
    # Each route's running requests at the pair's start (NaN: unknown; None: no loads).
    load: FloatArray | None = None
    # Sampled-output parity: answer statistic -> its value per side, NaN where the pair is
    # not eligible (`gate.parity.eligibility`) or the side lacks it (None: no such data).
    parity: dict[str, FloatArray] | None = None
    # Per pair: a sampled side's log-probabilities do not cover its answer (with `parity`).
    partial_logprobs: BoolArray | None = None
    # Per-token exactness: per side, (tested tokens, cut tokens, the BINS bin shares, off,
    # off_p, off_p2; `gate.stats.record_columns.FIT_WIDTH`) as
    # stored (`gate.exactness_fit.TokenFit`), on a trailing axis after the sides; NaN where a
    # side carried none (None: no side of any pair did).
    exactness: FloatArray | None = None
    # Per pair: its episode (conversation, agent run) as an integer code, equal codes one
    # episode; a pair without an episode has a code of its own. None: every pair is its own
    # episode (the statistics are then exactly those of independent pairs).
    episode: IntArray | None = None
    # Per pair: its episode has a pair in an earlier stage of the rollout (the record's
    # `episode_continues`), so no pair of it opens the episode here. None: none has.
    continues: BoolArray | None = None
    # Per pair and side (n, 2: baseline, candidate), the loop guardrail's outcome: the
    # baseline answer collapsed against the candidate's (`acceptance_length.baseline_collapse`),
    # the candidate's repetition-loop signature (`loop_outcome`); 1, 0, NaN where not
    # readable. None: not recorded (every pair unreadable).
    looping: FloatArray | None = None


@dataclass(frozen=True)
class Context:
    """What every cell builder reads: the columns, the policy and the pairs' roles."""

    cols: PairColumns
    policy: Policy
    warm: BoolArray
    live: BoolArray
    share: float
    # Canary mode: each pair has the one side that served it (unpaired forms).
    canary: bool = False

    @property
    def both_ok(self) -> BoolArray:
        return np.asarray(self.live & ~self.cols.failed.any(axis=-1))

    @property
    def served(self) -> BoolArray:
        return served(self.cols, self.live)


def load_matched(cols: PairColumns, tolerance: float | None) -> BoolArray:
    """Return which pairs the gate may judge for their loads (`policy.load_tolerance`).

    With a tolerance, a pair is load-matched when both routes' running requests at its
    start are known and differ by at most it (the fold's SQL: `gate.verdicts.slices`);
    without one (None), every pair is.
    """
    every = np.ones(cols.segment.shape, dtype=bool)
    if tolerance is None:
        return every
    if cols.load is None:
        return ~every
    gap = np.abs(cols.load[..., CAND] - cols.load[..., BASE])
    with np.errstate(invalid="ignore"):
        return np.asarray(np.isfinite(gap) & (gap <= tolerance))


def served(cols: PairColumns, live: BoolArray) -> BoolArray:
    """Return which cohort served each live canary pair (unpaired: one side per pair).

    A candidate call that fell back is the candidate's route failure; the baseline call
    that rescued it answered the candidate's request, so it is no baseline sample.
    """
    answered = ~np.isnan(cols.e2e) | cols.failed
    rescue = answered[..., CAND]
    base = answered[..., BASE] & ~rescue
    return np.asarray(live[..., None] & np.stack([base, answered[..., CAND]], axis=-1))


class Acc:
    """Cumulative sums per segment, sampled at the looks.

    With `episode` codes, `mean` also keeps each cell's episode sums (`EpisodeMean`).
    """

    def __init__(
        self,
        segment: IntArray,
        n_segments: int,
        looks: IntArray,
        episode: IntArray | None = None,
    ) -> None:
        self.onehot = [segment == s for s in range(n_segments)]
        self.starts = np.concatenate([[0], looks[:-1]])
        self.end = int(looks[-1])
        self.episodes = None if episode is None else _EpisodeOrder(episode, segment.shape)

    def __call__(self, values: npt.NDArray[Any], seg: int | None) -> FloatArray:
        picked = values if seg is None else np.where(self.onehot[seg], values, 0)
        # Sum each block between looks, then accumulate blocks: cheaper than a full cumsum.
        blocks = np.add.reduceat(picked[..., : self.end], self.starts, axis=-1, dtype=np.float64)
        return np.asarray(np.cumsum(blocks, axis=-1), dtype=np.float64)


class _EpisodeOrder:
    """Pairs sorted by episode (stably, so fold order within one), for per-episode sums."""

    def __init__(self, episode: IntArray, shape: tuple[int, ...]) -> None:
        codes = np.broadcast_to(episode, shape)
        self.order = np.argsort(codes, axis=-1, kind="stable")
        ranked = np.take_along_axis(codes, self.order, axis=-1)
        first = np.ones(shape, dtype=bool)
        first[..., 1:] = ranked[..., 1:] != ranked[..., :-1]
        position = np.broadcast_to(np.arange(shape[-1]), shape)
        self.start = np.maximum.accumulate(np.where(first, position, 0), axis=-1)

    def before(self, values: FloatArray) -> FloatArray:
        """Return, per pair, the sum of `values` over the earlier pairs of its episode."""
        ranked = np.take_along_axis(values, self.order, axis=-1)
        upto = np.cumsum(ranked, axis=-1) - ranked
        prior = upto - np.take_along_axis(upto, self.start, axis=-1)
        out = np.empty_like(prior)
        np.put_along_axis(out, self.order, prior, axis=-1)
        return out


def mean(acc: Acc, valid: BoolArray, x: FloatArray, seg: int | None) -> MeanStats:
    """Return the cumulative count, sum and sum of squares of `x` where `valid`.

    With episodes (`Acc(episode=...)`), an `EpisodeMean`: the episode sums too, each pair
    adding what it changes in them given the earlier pairs of its episode in the cell.
    """
    x = np.where(valid, x, 0.0)
    if acc.episodes is None:
        return MeanStats(acc(valid, seg), acc(x, seg), acc(x * x, seg))
    v = np.asarray(valid if seg is None else valid & acc.onehot[seg], dtype=np.float64)
    x = x * v
    s_before, n_before = acc.episodes.before(x), acc.episodes.before(v)
    return EpisodeMean(
        acc(v, seg), acc(x, seg), acc(x * x, seg),
        episodes=acc(v * (n_before == 0), seg),
        episode_sq=acc(x * (2.0 * s_before + x), seg),
        episode_cross=acc(s_before * v + x * (n_before + v), seg),
        episode_n_sq=acc(v * (2.0 * n_before + v), seg),
    )  # fmt: skip


Builder = Callable[[Acc, int | None], CellStats]


def mean_builder(valid: BoolArray, x: FloatArray) -> Builder:
    """Return a builder of the mean of `x` where `valid`."""
    return lambda acc, seg: mean(acc, valid, x, seg)


def two_means_builder(valid: BoolArray, x: FloatArray) -> Builder:
    """Return a builder of each side's mean of `x` where `valid` (unpaired)."""

    def build(acc: Acc, seg: int | None) -> CellStats:
        sides = [mean(acc, valid[..., i], x[..., i], seg) for i in (BASE, CAND)]
        return TwoMeans(*sides)

    return build


def log_ratio(x: FloatArray) -> FloatArray:
    """Return each pair's clipped log(candidate / baseline)."""
    # Missing or non-positive latencies give NaN: the pair is left out of the mean.
    positive = (x > 0).all(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(x[..., CAND] / x[..., BASE])
    clipped = np.clip(ratio, -LOG_RATIO_CLIP, LOG_RATIO_CLIP)
    return np.asarray(np.where(positive, clipped, np.nan), dtype=np.float64)
