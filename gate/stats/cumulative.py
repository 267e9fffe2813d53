"""Recorded pairs as columns, and their sufficient statistics at every look at once.

Replay (one recorded rollout) and simulation (thousands of simulated ones) both hold
pairs as `PairColumns` with leading axes (runs, pairs) or (pairs,), and turn them into
one `GateStats` whose arrays have a trailing looks axis, with cumulative sums taken once.
Production folds the same statistics incrementally: SQL aggregates of each new slice of
pairs (`gate.verdicts.slices`) added into a stored state (`gate.stats.incremental`).

Warm-up: the first `policy.warmup_pairs` pairs, in the order given (fold order for
recorded pairs, see `gate.stats.replay`), are excluded from every test. They fix
the tail thresholds (the baseline's warm-up quantile of TTFT and e2e, pooled) and each
segment's acceptance-collapse level (`collapse_ratio` times its warm-up mean).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt

from gate.db.enums import RolloutMode
from gate.stats.change import log_evalues
from gate.stats.ids import ALL, UNDECLARED, Cell, MetricId
from gate.stats.policy import Policy
from gate.stats.registry import Family, Guardrail, Source, banded, collapse_segments, tested
from gate.stats.rule import BandStats, CellStats, GateStats
from gate.stats.sequences import (
    LOG_RATIO_CLIP,
    BoolArray,
    CohortCounts,
    CountStats,
    FloatArray,
    IntArray,
    MeanStats,
    PairedCounts,
    TwoCounts,
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


class _Acc:
    """Cumulative sums per segment, sampled at the looks."""

    def __init__(self, segment: IntArray, n_segments: int, looks: IntArray) -> None:
        self.onehot = [segment == s for s in range(n_segments)]
        self.starts = np.concatenate([[0], looks[:-1]])
        self.end = int(looks[-1])

    def __call__(self, values: npt.NDArray[Any], seg: int | None) -> FloatArray:
        picked = values if seg is None else np.where(self.onehot[seg], values, 0)
        # Sum each block between looks, then accumulate blocks: cheaper than a full cumsum.
        blocks = np.add.reduceat(picked[..., : self.end], self.starts, axis=-1, dtype=np.float64)
        return np.asarray(np.cumsum(blocks, axis=-1), dtype=np.float64)


def _mean(acc: _Acc, valid: BoolArray, x: FloatArray, seg: int | None) -> MeanStats:
    x = np.where(valid, x, 0.0)
    return MeanStats(acc(valid, seg), acc(x, seg), acc(x * x, seg))


def _paired(acc: _Acc, valid: BoolArray, bad: BoolArray, seg: int | None) -> PairedCounts:
    worse = valid & bad[..., CAND] & ~bad[..., BASE]
    better = valid & bad[..., BASE] & ~bad[..., CAND]
    return PairedCounts(acc(valid, seg), acc(worse, seg), acc(better, seg))


def _cohort_counts(
    acc: _Acc, valid: BoolArray, bad: BoolArray, seg: int | None, share: float
) -> CohortCounts:
    hits = valid & bad
    n = acc(np.asarray(valid.any(axis=-1)), seg)
    return CohortCounts(n, acc(hits[..., CAND], seg), acc(hits[..., BASE], seg), share)


def _two_counts(acc: _Acc, valid: BoolArray, bad: BoolArray, seg: int | None) -> TwoCounts:
    side = [
        CountStats(acc(valid[..., i], seg), acc((valid & bad)[..., i], seg)) for i in (BASE, CAND)
    ]
    return TwoCounts(*side)


def _tail_threshold(
    x: FloatArray, segment: IntArray, usable: BoolArray, q: float, n_segments: int
) -> FloatArray:
    """Return each pair's tail threshold, fixed from the baseline's warm-up.

    Segments differ in scale (code answers are long, chat short), so one pooled quantile
    would put most of one segment in the tail. Each warm-up baseline value is divided by
    its segment's warm-up median, the pooled `q`-quantile of those ratios is taken, and a
    segment's threshold is that quantile times its median: about `1 - q` of each
    segment's baseline exceeds it, with a quantile estimated from the whole warm-up.
    """
    base = np.where(usable, x[..., BASE], np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices are expected
        pooled = np.nanmedian(base, axis=-1, keepdims=True)
        medians = [
            np.nanmedian(np.where(segment == s, base, np.nan), axis=-1, keepdims=True)
            for s in range(n_segments)
        ]
        scale = np.broadcast_to(pooled, segment.shape).copy()
        for s, median in enumerate(medians):
            scale = np.where((segment == s) & np.isfinite(median), median, scale)
        ratio_q = np.nanquantile(base / scale, q, axis=-1, keepdims=True)
    return np.asarray(scale * ratio_q, dtype=np.float64)


def looks_every(n_pairs: int, every: int) -> IntArray:
    """Return look positions (pair counts) every `every` pairs, plus the last pair."""
    looks = np.arange(every, n_pairs + 1, every, dtype=np.int64)
    if looks.size == 0 or looks[-1] != n_pairs:
        looks = np.append(looks, n_pairs)
    return looks


def to_stats(
    cols: PairColumns,
    policy: Policy,
    looks: IntArray,
    *,
    mode: RolloutMode = RolloutMode.SHADOW,
    candidate_share: float = 0.5,
    next_share: float | None = 1.0,
) -> GateStats:
    """Return the gate's sufficient statistics after each look (pair counts `looks`).

    `next_share` is the candidate's traffic share once promoted (`next_stage_share`; None:
    no hold for this step): the load bands' hold compares the load it will bring with the
    loads where the gain is proven.
    """
    n_total = cols.segment.shape[-1]
    index = np.arange(n_total)
    warm = index < policy.warmup_pairs
    live = ~warm & ~cols.dropped & ~cols.is_control
    acc = _Acc(cols.segment, len(policy.segments), looks)
    cells: dict[tuple[str, str], CellStats] = {}
    seg_index = {name: i for i, name in enumerate(policy.segments)}
    ctx = _Context(cols, policy, warm, live, candidate_share)
    for g in tested(mode):
        build = _BUILDERS[(g.source, g.family(mode))]
        for metric, builder in build(ctx, g).items():
            for name in g.segments(policy):
                cells[Cell(metric, name)] = builder(acc, seg_index.get(name))
    control = _parity_control(ctx, acc) if mode is RolloutMode.SHADOW else {}
    counted = acc(live, None)
    cohorts = None
    if mode is RolloutMode.CANARY:
        served = _served(cols, live)
        cohorts = (acc(served[..., BASE], None), acc(served[..., CAND], None))
    return GateStats(
        cells=cells,
        n_pairs=counted,
        n_dropped=acc((~warm & cols.dropped), None),
        elapsed_s=_elapsed(cols.created_s, looks),
        warmed_up=np.broadcast_to(looks > policy.warmup_pairs, counted.shape),
        collapse=_collapse(cols, policy, warm, live, looks),
        cohort_counts=cohorts,
        candidate_share=candidate_share,
        bands=_bands(ctx, acc, mode, next_share),
        control=control,
    )  # fmt: skip


Builder = Callable[[_Acc, int | None], CellStats]


def _elapsed(created_s: FloatArray, looks: IntArray) -> FloatArray:
    # Earliest to latest pair so far: fold order need not be creation order.
    latest = np.maximum.accumulate(created_s, axis=-1)[..., looks - 1]
    earliest = np.minimum.accumulate(created_s, axis=-1)[..., looks - 1]
    return np.asarray(latest - earliest, dtype=np.float64)


def _log_ratio(x: FloatArray) -> FloatArray:
    # Missing or non-positive latencies give NaN: the pair is left out of the mean.
    positive = (x > 0).all(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(x[..., CAND] / x[..., BASE])
    clipped = np.clip(ratio, -LOG_RATIO_CLIP, LOG_RATIO_CLIP)
    return np.asarray(np.where(positive, clipped, np.nan), dtype=np.float64)


def _mean_builder(valid: BoolArray, x: FloatArray) -> Builder:
    return lambda acc, seg: _mean(acc, valid, x, seg)


def _paired_builder(valid: BoolArray, bad: BoolArray) -> Builder:
    return lambda acc, seg: _paired(acc, valid, bad, seg)


def _two_builder(valid: BoolArray, bad: BoolArray) -> Builder:
    return lambda acc, seg: _two_counts(acc, valid, bad, seg)


def _cohort_builder(valid: BoolArray, bad: BoolArray, share: float) -> Builder:
    return lambda acc, seg: _cohort_counts(acc, valid, bad, seg, share)


def _tail_bad(
    cols: PairColumns, x: FloatArray, warm: BoolArray, q: float, n_segments: int
) -> tuple[BoolArray, BoolArray]:
    """Return tail exceedances per side, and where a threshold exists at all."""
    usable = warm & ~cols.is_control & ~cols.dropped & ~cols.failed[..., BASE]
    threshold = _tail_threshold(x, cols.segment, usable, q, n_segments)
    # A route failure (error, timeout, fallback) is in the tail by definition. Without warm-up data
    # there is no threshold, hence no tail data: the cell stays empty, never proven.
    return cols.failed | (x > threshold[..., None]), np.isfinite(threshold)


@dataclass(frozen=True)
class _Context:
    cols: PairColumns
    policy: Policy
    warm: BoolArray
    live: BoolArray
    share: float

    @property
    def both_ok(self) -> BoolArray:
        return np.asarray(self.live & ~self.cols.failed.any(axis=-1))

    @property
    def served(self) -> BoolArray:
        return _served(self.cols, self.live)


def _latency(ctx: _Context, g: Guardrail) -> FloatArray:
    return {Source.TTFT: ctx.cols.ttft, Source.TPOT: ctx.cols.tpot, Source.E2E: ctx.cols.e2e}[
        g.source
    ]


def _paired_log_ratio(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    lr = _log_ratio(_latency(ctx, g))
    return {MetricId(g.id): _mean_builder(ctx.both_ok & np.isfinite(lr), lr)}


def _unpaired_log_means(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    with np.errstate(divide="ignore", invalid="ignore"):
        logx = np.log(_latency(ctx, g))
    ok = ctx.served & ~ctx.cols.failed
    return {MetricId(g.id): _two_means_builder(ok & np.isfinite(logx), logx)}


def _exceedances(ctx: _Context, g: Guardrail) -> tuple[BoolArray, BoolArray]:
    assert g.quantile is not None, g.id
    q = g.quantile(ctx.policy)
    return _tail_bad(ctx.cols, _latency(ctx, g), ctx.warm, q, len(ctx.policy.segments))


def _paired_exceedance(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    bad, known = _exceedances(ctx, g)
    return {MetricId(g.id): _paired_builder(ctx.live & known, bad)}


def _cohort_exceedance(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    bad, known = _exceedances(ctx, g)
    return {MetricId(g.id): _cohort_builder(ctx.served & known[..., None], bad, ctx.share)}


def _paired_failures(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    return {MetricId(g.id): _paired_builder(ctx.live, ctx.cols.failed)}


def _cohort_failures(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    return {MetricId(g.id): _cohort_builder(ctx.served, ctx.cols.failed, ctx.share)}


def _cohort_cancels(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    return {MetricId(g.id): _cohort_builder(*_cancels(ctx.cols, ctx.warm), ctx.share)}


def _paired_evaluators(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    return {
        metric: _paired_builder(ctx.live & scored.all(axis=-1), bad)
        for metric, (scored, bad) in _evals(ctx.cols, ctx.policy).items()
    }


def _cohort_evaluators(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    return {
        metric: _cohort_builder(ctx.served & scored, bad, ctx.share)
        for metric, (scored, bad) in _evals(ctx.cols, ctx.policy).items()
    }


def _rated(ctx: _Context) -> tuple[BoolArray, BoolArray] | None:
    if ctx.cols.feedback is None:
        return None
    return ctx.live[..., None] & ~np.isnan(ctx.cols.feedback), ctx.cols.feedback == 1


def _two_feedback(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    rated = _rated(ctx)
    return {} if rated is None else {MetricId(g.id): _two_builder(*rated)}


def _cohort_feedback(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    rated = _rated(ctx)
    return {} if rated is None else {MetricId(g.id): _cohort_builder(*rated, ctx.share)}


def _greedy(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    cols = ctx.cols
    if cols.mismatch is None:
        return {}
    greedy = ~ctx.warm & ~cols.dropped & ~np.isnan(cols.mismatch)
    valid = np.stack([greedy & cols.is_control, greedy & ~cols.is_control], axis=-1)
    bad = np.stack([cols.mismatch == 1] * 2, axis=-1)
    return {MetricId(g.id): _two_builder(valid, bad)}


def _acceptance(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    has_rate = ctx.live & np.isfinite(ctx.cols.acceptance)
    return {MetricId(g.id): _mean_builder(has_rate, ctx.cols.acceptance)}


def _warm_sd(x: FloatArray, mask: BoolArray) -> tuple[FloatArray, FloatArray]:
    """Return the count and standard deviation of `x` where `mask`, along the pairs axis."""
    n = mask.sum(axis=-1, keepdims=True).astype(np.float64)
    v = np.where(mask, x, 0.0)
    mean = v.sum(axis=-1, keepdims=True) / np.maximum(n, 1.0)
    ss = np.where(mask, (x - mean) ** 2, 0.0).sum(axis=-1, keepdims=True)
    return n, np.sqrt(ss / np.maximum(n - 1.0, 1.0))


def parity_scale(
    d: FloatArray, usable: BoolArray, is_control: BoolArray, least: int, *, spoiled: BoolArray
) -> FloatArray:
    """Return the sd of d that scales a parity cell, from the warm-up's usable pairs.

    The control slice's pairs (baseline vs baseline) measure the null spread; with fewer
    than `least` of them the warm-up's eligible candidate pairs do (alike under the null).
    Warm-up pairs enter no test, so the scale is independent of the tested d. The fold
    (`gate.verdicts.slices`) calls it on the warm-up's stored differences.

    Args:
        d: each pair's difference (NaN where not comparable), pairs on the last axis.
        usable: the warm-up pairs that may set the scale (not dropped, d finite).
        is_control: the control slice's pairs.
        least: the pairs needed for a scale (`min_scale_pairs`).
        spoiled: warm-up pairs showing that which pairs have d depends on their answers
            (`gate.stats.replay.partial_logprobs`, for mean log-prob): any, and no scale.

    Returns:
        The scale, the pairs axis kept with length 1; NaN where there is none.
    """
    n_ctl, sd_ctl = _warm_sd(d, usable & is_control)
    n_all, sd_all = _warm_sd(d, usable & ~is_control)
    sd = np.where(n_ctl >= least, sd_ctl, np.where(n_all >= least, sd_all, np.nan))
    sd = np.where(spoiled.any(axis=-1, keepdims=True), np.nan, sd)
    return np.asarray(np.where(sd > 0, sd, np.nan), dtype=np.float64)


def _parity_scale(ctx: _Context, d: FloatArray, stat: str) -> FloatArray:
    """Return the sd of d that scales a parity cell, fixed in warm-up (NaN: none yet)."""
    usable = ctx.warm & ~ctx.cols.dropped & np.isfinite(d)
    least = ctx.policy.guardrails.output_parity.min_scale_pairs
    return parity_scale(d, usable, ctx.cols.is_control, least, spoiled=_spoiled(ctx, stat))


def _spoiled(ctx: _Context, stat: str) -> BoolArray:
    """Return the warm-up pairs whose partial log-probabilities leave `stat` untested."""
    partial = ctx.cols.partial_logprobs
    if stat != "mean_logprob" or partial is None:
        return np.zeros_like(ctx.warm)
    return np.asarray(ctx.warm & ~ctx.cols.dropped & partial, dtype=bool)


def _parity_z(ctx: _Context) -> dict[str, FloatArray]:
    """Return each statistic's d in warm-up standard deviations (NaN: not eligible)."""
    assert ctx.cols.parity is not None
    out = {}
    for stat, x in ctx.cols.parity.items():
        d = x[..., CAND] - x[..., BASE]
        with np.errstate(invalid="ignore"):
            out[stat] = np.asarray(d / _parity_scale(ctx, d, stat), dtype=np.float64)
    return out


def _paired_parity(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    if ctx.cols.parity is None:
        return {}
    return {
        MetricId(g.id, stat): _mean_builder(ctx.live & np.isfinite(z), np.nan_to_num(z))
        for stat, z in _parity_z(ctx).items()
    }


def _cohort_parity(ctx: _Context, g: Guardrail) -> dict[MetricId, Builder]:
    """Canary: the unpaired two-sample form, each cohort's answers in warm-up units.

    One answer per pair: the scale is the pooled warm-up sd of the answers times sqrt(2),
    the sd of a difference of two independent answers, so margins read as in shadow.
    """
    if ctx.cols.parity is None:
        return {}
    out = {}
    served = ctx.served
    for stat, x in ctx.cols.parity.items():
        ok = np.isfinite(x)
        warm = (ctx.warm & ~ctx.cols.dropped)[..., None] & ok
        flat_x = x.reshape(*x.shape[:-2], -1)
        n, sd = _warm_sd(flat_x, warm.reshape(flat_x.shape))
        least = ctx.policy.guardrails.output_parity.min_scale_pairs
        spoiled = _spoiled(ctx, stat).any(axis=-1, keepdims=True)
        scale = np.where((n >= least) & (sd > 0) & ~spoiled, sd * np.sqrt(2.0), np.nan)[..., None]
        with np.errstate(invalid="ignore"):
            z = x / scale
        valid = served & np.isfinite(z)
        out[MetricId(g.id, stat)] = _two_means_builder(valid, np.nan_to_num(z))
    return out


def _parity_control(ctx: _Context, acc: _Acc) -> dict[tuple[str, str], CellStats]:
    """Return the control slice's parity cells (pooled), for the data-quality alarm."""
    if ctx.cols.parity is None:
        return {}
    control = ~ctx.warm & ~ctx.cols.dropped & ctx.cols.is_control
    out: dict[tuple[str, str], CellStats] = {}
    for g in tested(RolloutMode.SHADOW):
        if not g.control_alarm or g.source is not Source.PARITY:
            continue
        for stat, z in _parity_z(ctx).items():
            valid = control & np.isfinite(z)
            out[Cell(MetricId(g.id, stat), ALL)] = _mean(acc, valid, np.nan_to_num(z), None)
    return out


_LATENCIES = (Source.TTFT, Source.TPOT, Source.E2E)
BuildCells = Callable[[_Context, Guardrail], dict[MetricId, Builder]]
# How each (source, family) pair of the registry is computed from pair columns.
_BUILDERS: dict[tuple[Source, Family | None], BuildCells] = {
    **{(src, Family.PAIRED_LOG_RATIO): _paired_log_ratio for src in _LATENCIES},
    **{(src, Family.UNPAIRED_LOG_MEANS): _unpaired_log_means for src in _LATENCIES},
    **{(src, Family.EXCEEDANCE): _paired_exceedance for src in _LATENCIES},
    **{(src, Family.UNPAIRED_RATES): _cohort_exceedance for src in _LATENCIES},
    (Source.FAILED, Family.PAIRED_DIFFERENCE): _paired_failures,
    (Source.FAILED, Family.UNPAIRED_RATES): _cohort_failures,
    (Source.CANCELLED, Family.UNPAIRED_RATES): _cohort_cancels,
    (Source.EVALUATOR, Family.PAIRED_DIFFERENCE): _paired_evaluators,
    (Source.EVALUATOR, Family.UNPAIRED_RATES): _cohort_evaluators,
    (Source.FEEDBACK, Family.TWO_RATES): _two_feedback,
    (Source.FEEDBACK, Family.UNPAIRED_RATES): _cohort_feedback,
    (Source.GREEDY, Family.TWO_RATES): _greedy,
    (Source.ACCEPTANCE, Family.MEAN_FLOOR): _acceptance,
    (Source.PARITY, Family.PAIRED_MEAN): _paired_parity,
    (Source.PARITY, Family.UNPAIRED_MEANS): _cohort_parity,
}


def _bands(
    ctx: _Context, acc: _Acc, mode: RolloutMode, next_share: float | None
) -> BandStats | None:
    """Return the primary's paired log-ratio per band of the candidate's load (shadow).

    A pair counts in a band when both routes' loads are known; its band is where the
    candidate's running requests fall among the policy's edges.
    """
    policy, cols = ctx.policy, ctx.cols
    g = banded(policy)
    if g is None or g.family(mode) is not Family.BAND or cols.load is None:
        return None
    primary = {"tpot": cols.tpot, "e2e": cols.e2e}[policy.primary.metric]
    lr = _log_ratio(primary)
    load = cols.load
    known = np.isfinite(load).all(axis=-1)
    if mode is RolloutMode.SHADOW:
        valid = ctx.both_ok & np.isfinite(lr) & known
    else:  # canary has no paired ratio: the bands stay empty
        valid = np.zeros(lr.shape, dtype=bool)
    edges = policy.guardrails.load_bands.edges
    band = np.searchsorted(np.asarray(edges), np.where(known, load[..., CAND], 0.0), side="right")
    gains, cand, base = [], [], []
    for b in range(len(edges) + 1):
        member = valid & (band == b)
        gains.append(_mean(acc, member, lr, None))
        cand.append(acc(np.where(member, load[..., CAND], 0.0), None))
        base.append(acc(np.where(member, load[..., BASE], 0.0), None))
    return BandStats(
        labels=band_labels(edges),
        gain=tuple(gains),
        candidate_load=tuple(cand),
        baseline_load=tuple(base),
        next_share=next_share,
    )


def band_labels(edges: list[float]) -> tuple[str, ...]:
    """Return the bands' names: `<2`, `2-4`, ..., `>=128` (running requests)."""
    shown = [f"{e:g}" for e in edges]
    inner = [f"{a}-{b}" for a, b in pairwise(shown)]
    return (f"<{shown[0]}", *inner, f">={shown[-1]}")


def _evals(cols: PairColumns, policy: Policy) -> dict[MetricId, tuple[BoolArray, BoolArray]]:
    # A failed side fails every evaluator; an unscored ok side leaves the pair out.
    out = {}
    for name, scores in cols.evals.items():
        if name != policy.guardrails.greedy_mismatch.evaluator:
            bad = cols.failed | (scores == 1)
            out[MetricId("eval", name)] = (~np.isnan(scores) | cols.failed, bad)
    return out


def _served(cols: PairColumns, live: BoolArray) -> BoolArray:
    """Return which cohort served each live canary pair (unpaired: one side per pair).

    A candidate call that fell back is the candidate's route failure; the baseline call
    that rescued it answered the candidate's request, so it is no baseline sample.
    """
    answered = ~np.isnan(cols.e2e) | cols.failed
    rescue = answered[..., CAND]
    base = answered[..., BASE] & ~rescue
    return np.asarray(live[..., None] & np.stack([base, answered[..., CAND]], axis=-1))


def _cancels(cols: PairColumns, warm: BoolArray) -> tuple[BoolArray, BoolArray]:
    """Return each cohort's calls (cancelled ones included) and the cancelled pairs.

    A cancelled pair is dropped from every other cell (no route is answerable for it), but
    a client that gives up can hide a slow candidate, so here it counts for the cohort
    that served it, as `_served` assigns cohorts: a cancelled rescue is the candidate's.
    """
    shape = cols.failed.shape
    cancelled = np.zeros(shape, dtype=bool) if cols.cancelled is None else cols.cancelled
    gave_up = cancelled.any(axis=-1)
    counted = ~warm & ~cols.is_control & (~cols.dropped | gave_up)
    called = ~np.isnan(cols.e2e) | cols.failed | cancelled
    cand = called[..., CAND]
    cohort = np.stack([called[..., BASE] & ~cand, cand], axis=-1)
    return counted[..., None] & cohort, np.stack([gave_up, gave_up], axis=-1)


def _two_means_builder(valid: BoolArray, x: FloatArray) -> Builder:
    def build(acc: _Acc, seg: int | None) -> CellStats:
        sides = [_mean(acc, valid[..., i], x[..., i], seg) for i in (BASE, CAND)]
        return TwoMeans(*sides)

    return build


def _collapse(
    cols: PairColumns, policy: Policy, warm: BoolArray, live: BoolArray, looks: IntArray
) -> dict[str, FloatArray]:
    g = policy.guardrails.acceptance
    if not g.enabled:
        return {}
    rate = np.nan_to_num(cols.acceptance)
    has = np.isfinite(cols.acceptance)
    pooled = _warm_mean(rate, warm & has, None)
    out = {}
    for name in collapse_segments(policy):
        member = _members(cols.segment, policy, name)
        level = _warm_mean(rate, warm & has & member, pooled)
        use = live & has & member
        log_e = np.where(use, log_evalues(rate, g.collapse_ratio * level), 0.0)
        cum = np.cumsum(log_e, axis=-1)
        # Masked Shiryaev-Roberts: non-members neither add a term nor multiply.
        starts = np.where(use, -(cum - log_e), -np.inf)
        log_sr = cum + np.logaddexp.accumulate(starts, axis=-1)
        out[name] = np.maximum.accumulate(log_sr, axis=-1)[..., looks - 1]
    return out


def _members(segment: IntArray, policy: Policy, name: str) -> BoolArray:
    """Return the pairs a collapse detector reads (pooled: all; undeclared: the others)."""
    if name == ALL:
        return np.ones(segment.shape, dtype=bool)
    if name == UNDECLARED:
        return np.asarray((segment < 0) | (segment >= len(policy.segments)))
    return np.asarray(segment == policy.segments.index(name))


def _warm_mean(rate: FloatArray, mask: BoolArray, fallback: FloatArray | None) -> FloatArray:
    count = mask.sum(axis=-1, keepdims=True)
    mean = np.where(mask, rate, 0.0).sum(axis=-1, keepdims=True) / np.maximum(count, 1)
    if fallback is None:
        return np.asarray(mean, dtype=np.float64)
    return np.asarray(np.where(count > 0, mean, fallback), dtype=np.float64)


def at_look(stats: GateStats, i: int) -> GateStats:
    """Return the statistics of look `i` alone (the last axis indexed away)."""
    return _index(stats, i)  # type: ignore[no-any-return]


def _index(value: Any, i: int) -> Any:
    if isinstance(value, np.ndarray):
        return value[..., i] if value.ndim else value
    if isinstance(value, dict):
        return {k: _index(v, i) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_index(v, i) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _index(getattr(value, f.name), i) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    return value
