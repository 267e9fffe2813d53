"""Each guardrail's cells from pair columns: latencies, tails, failures, evaluators, more.

`BUILDERS` maps each (source, family) of the registry to the function that turns a
`Context` into that guardrail's cell builders: latency log-ratios and log-means, tail
exceedances over warm-up thresholds, route failures, canary cancels, evaluators, user
feedback, greedy parity, acceptance, and sampled-output parity (`gate.stats.parity_cells`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from gate.stats.columns import (
    BASE,
    CAND,
    Acc,
    Builder,
    Context,
    PairColumns,
    log_ratio,
    mean,
    mean_builder,
    two_means_builder,
)
from gate.stats.exactness_cells import candidate_tokens
from gate.stats.ids import MetricId
from gate.stats.parity_cells import cohort_parity, paired_parity
from gate.stats.policy import Policy
from gate.stats.registry import Family, Guardrail, Source
from gate.stats.sequences import (
    BoolArray,
    CohortCounts,
    CountStats,
    EpisodeCohorts,
    EpisodeCounts,
    EpisodeMean,
    EpisodeTwoCounts,
    FloatArray,
    IntArray,
    PairedCounts,
    TwoCounts,
    cohort_values,
)


def _paired(acc: Acc, valid: BoolArray, bad: BoolArray, seg: int | None) -> PairedCounts:
    worse = valid & bad[..., CAND] & ~bad[..., BASE]
    better = valid & bad[..., BASE] & ~bad[..., CAND]
    counts = PairedCounts(acc(valid, seg), acc(worse, seg), acc(better, seg))
    if acc.episodes is None:
        return counts
    # Episodes: the difference's mean, with the episode as the unit (`EpisodeCounts`).
    d = worse.astype(np.float64) - better.astype(np.float64)
    difference = mean(acc, valid, d, seg)
    assert isinstance(difference, EpisodeMean)
    return EpisodeCounts(counts.n, counts.worse, counts.better, difference)


def _cohort_counts(
    acc: Acc, valid: BoolArray, bad: BoolArray, seg: int | None, share: float
) -> CohortCounts:
    hits = valid & bad
    served = np.asarray(valid.any(axis=-1))
    counts = CohortCounts(
        acc(served, seg), acc(hits[..., CAND], seg), acc(hits[..., BASE], seg), share
    )
    if acc.episodes is None:
        return counts
    # Episodes: the cohort is drawn per episode, so its pseudo-outcomes' mean takes the
    # episode as the unit (`EpisodeCohorts`).
    low, high = cohort_values(share)
    x = high * hits[..., CAND].astype(np.float64) + low * hits[..., BASE].astype(np.float64)
    difference = mean(acc, served, x, seg)
    assert isinstance(difference, EpisodeMean)
    return EpisodeCohorts(counts.n, counts.candidate, counts.baseline, share, difference)


def _two_counts(acc: Acc, valid: BoolArray, bad: BoolArray, seg: int | None) -> TwoCounts:
    side = [
        CountStats(acc(valid[..., i], seg), acc((valid & bad)[..., i], seg)) for i in (BASE, CAND)
    ]
    if acc.episodes is None:
        return TwoCounts(*side)
    # Episodes: each side's 0/1 outcomes as a mean with the episode as the unit.
    outcomes = [mean(acc, valid[..., i], bad[..., i].astype(np.float64), seg) for i in (BASE, CAND)]
    assert all(isinstance(o, EpisodeMean) for o in outcomes)
    return EpisodeTwoCounts(*side, *outcomes)  # type: ignore[arg-type]


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


def _latency(ctx: Context, g: Guardrail) -> FloatArray:
    return {Source.TTFT: ctx.cols.ttft, Source.TPOT: ctx.cols.tpot, Source.E2E: ctx.cols.e2e}[
        g.source
    ]


def _paired_log_ratio(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    lr = log_ratio(_latency(ctx, g))
    return {MetricId(g.id): mean_builder(ctx.both_ok & np.isfinite(lr), lr)}


def _unpaired_log_means(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    with np.errstate(divide="ignore", invalid="ignore"):
        logx = np.log(_latency(ctx, g))
    ok = ctx.served & ~ctx.cols.failed
    return {MetricId(g.id): two_means_builder(ok & np.isfinite(logx), logx)}


def _exceedances(ctx: Context, g: Guardrail) -> tuple[BoolArray, BoolArray]:
    assert g.quantile is not None, g.id
    q = g.quantile(ctx.policy)
    return _tail_bad(ctx.cols, _latency(ctx, g), ctx.warm, q, len(ctx.policy.segments))


def _paired_exceedance(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    bad, known = _exceedances(ctx, g)
    return {MetricId(g.id): _paired_builder(ctx.live & known, bad)}


def _cohort_exceedance(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    bad, known = _exceedances(ctx, g)
    return {MetricId(g.id): _cohort_builder(ctx.served & known[..., None], bad, ctx.share)}


def _paired_failures(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    return {MetricId(g.id): _paired_builder(ctx.live, ctx.cols.failed)}


def _cohort_failures(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    return {MetricId(g.id): _cohort_builder(ctx.served, ctx.cols.failed, ctx.share)}


def _cohort_cancels(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    return {MetricId(g.id): _cohort_builder(*_cancels(ctx.cols, ctx.warm), ctx.share)}


def _paired_evaluators(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    return {
        metric: _paired_builder(ctx.live & scored.all(axis=-1), bad)
        for metric, (scored, bad) in _evals(ctx.cols, ctx.policy).items()
    }


def _cohort_evaluators(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    return {
        metric: _cohort_builder(ctx.served & scored, bad, ctx.share)
        for metric, (scored, bad) in _evals(ctx.cols, ctx.policy).items()
    }


def _rated(ctx: Context) -> tuple[BoolArray, BoolArray] | None:
    if ctx.cols.feedback is None:
        return None
    return ctx.live[..., None] & ~np.isnan(ctx.cols.feedback), ctx.cols.feedback == 1


def _two_feedback(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    rated = _rated(ctx)
    return {} if rated is None else {MetricId(g.id): _two_builder(*rated)}


def _cohort_feedback(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    rated = _rated(ctx)
    return {} if rated is None else {MetricId(g.id): _cohort_builder(*rated, ctx.share)}


def _greedy(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    cols = ctx.cols
    if cols.mismatch is None:
        return {}
    greedy = ~ctx.warm & ~cols.dropped & ~np.isnan(cols.mismatch)
    valid = np.stack([greedy & cols.is_control, greedy & ~cols.is_control], axis=-1)
    bad = np.stack([cols.mismatch == 1] * 2, axis=-1)
    return {MetricId(g.id): _two_builder(valid, bad)}


def _acceptance(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    has_rate = ctx.live & np.isfinite(ctx.cols.acceptance)
    return {MetricId(g.id): mean_builder(has_rate, ctx.cols.acceptance)}


def _paired_loops(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    # The candidate's loop signature against the baseline answer collapsed against the
    # candidate's (`acceptance_length.baseline_collapse`): a lossless candidate whose model
    # loops on its own is no worse than the baseline, and the kill keeps its level.
    loops = ctx.cols.looping
    if loops is None:
        loops = np.full((*ctx.cols.segment.shape, 2), np.nan)
    return {MetricId(g.id): _paired_builder(ctx.both_ok & np.isfinite(loops[..., 1]), loops == 1)}


def _evals(cols: PairColumns, policy: Policy) -> dict[MetricId, tuple[BoolArray, BoolArray]]:
    # A failed side fails every evaluator; an unscored ok side leaves the pair out.
    out = {}
    for name, scores in cols.evals.items():
        if name != policy.guardrails.greedy_mismatch.evaluator:
            bad = cols.failed | (scores == 1)
            out[MetricId("eval", name)] = (~np.isnan(scores) | cols.failed, bad)
    return out


def _cancels(cols: PairColumns, warm: BoolArray) -> tuple[BoolArray, BoolArray]:
    """Return each cohort's calls (cancelled ones included) and the cancelled pairs.

    A cancelled pair is dropped from every other cell (no route is answerable for it), but
    a client that gives up can hide a slow candidate, so here it counts for the cohort
    that served it, as `served` assigns cohorts: a cancelled rescue is the candidate's.
    """
    shape = cols.failed.shape
    cancelled = np.zeros(shape, dtype=bool) if cols.cancelled is None else cols.cancelled
    gave_up = cancelled.any(axis=-1)
    counted = ~warm & ~cols.is_control & (~cols.dropped | gave_up)
    called = ~np.isnan(cols.e2e) | cols.failed | cancelled
    cand = called[..., CAND]
    cohort = np.stack([called[..., BASE] & ~cand, cand], axis=-1)
    return counted[..., None] & cohort, np.stack([gave_up, gave_up], axis=-1)


_LATENCIES = (Source.TTFT, Source.TPOT, Source.E2E)
BuildCells = Callable[[Context, Guardrail], dict[MetricId, Builder]]
# How each (source, family) pair of the registry is computed from pair columns.
BUILDERS: dict[tuple[Source, Family | None], BuildCells] = {
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
    (Source.LOOP, Family.PAIRED_DIFFERENCE): _paired_loops,
    (Source.PARITY, Family.PAIRED_MEAN): paired_parity,
    (Source.PARITY, Family.UNPAIRED_MEANS): cohort_parity,
    (Source.EXACTNESS, Family.TOKEN_PIT): candidate_tokens,
}
