"""Sampled-output parity cells from pair columns, in units of the warm-up's spread.

Each answer statistic's difference d is divided by a scale fixed in warm-up
(`parity_scale`, which the Postgres fold shares): paired means in shadow, the unpaired
two-sample form in canary, and the control slice's cells for the data-quality alarm.
"""

from __future__ import annotations

import numpy as np

from gate.db.enums import RolloutMode
from gate.stats.columns import (
    BASE,
    CAND,
    Acc,
    Builder,
    Context,
    mean,
    mean_builder,
    two_means_builder,
)
from gate.stats.gate_stats import CellStats
from gate.stats.ids import ALL, Cell, MetricId
from gate.stats.registry import Guardrail, Source, tested
from gate.stats.sequences import BoolArray, FloatArray


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
    (`gate.verdicts.warmup`) calls it on the warm-up's stored differences.

    Args:
        d: each pair's difference (NaN where not comparable), pairs on the last axis.
        usable: the warm-up pairs that may set the scale (not dropped, d finite).
        is_control: the control slice's pairs.
        least: the pairs needed for a scale (`min_scale_pairs`).
        spoiled: warm-up pairs showing that which pairs have d depends on their answers
            (`gate.stats.record_columns.partial_logprobs`, for mean log-prob): any, and no scale.

    Returns:
        The scale, the pairs axis kept with length 1; NaN where there is none.
    """
    n_ctl, sd_ctl = _warm_sd(d, usable & is_control)
    n_all, sd_all = _warm_sd(d, usable & ~is_control)
    sd = np.where(n_ctl >= least, sd_ctl, np.where(n_all >= least, sd_all, np.nan))
    sd = np.where(spoiled.any(axis=-1, keepdims=True), np.nan, sd)
    return np.asarray(np.where(sd > 0, sd, np.nan), dtype=np.float64)


def _parity_scale(ctx: Context, d: FloatArray, stat: str) -> FloatArray:
    """Return the sd of d that scales a parity cell, fixed in warm-up (NaN: none yet)."""
    usable = ctx.warm & ~ctx.cols.dropped & np.isfinite(d)
    least = ctx.policy.guardrails.output_parity.min_scale_pairs
    return parity_scale(d, usable, ctx.cols.is_control, least, spoiled=_spoiled(ctx, stat))


def _spoiled(ctx: Context, stat: str) -> BoolArray:
    """Return the warm-up pairs whose partial log-probabilities leave `stat` untested."""
    partial = ctx.cols.partial_logprobs
    if stat != "mean_logprob" or partial is None:
        return np.zeros_like(ctx.warm)
    return np.asarray(ctx.warm & ~ctx.cols.dropped & partial, dtype=bool)


def _parity_z(ctx: Context) -> dict[str, FloatArray]:
    """Return each statistic's d in warm-up standard deviations (NaN: not eligible)."""
    assert ctx.cols.parity is not None
    out = {}
    for stat, x in ctx.cols.parity.items():
        d = x[..., CAND] - x[..., BASE]
        with np.errstate(invalid="ignore"):
            out[stat] = np.asarray(d / _parity_scale(ctx, d, stat), dtype=np.float64)
    return out


def paired_parity(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    """Shadow: each statistic's paired mean of d, in warm-up standard deviations."""
    if ctx.cols.parity is None:
        return {}
    return {
        MetricId(g.id, stat): mean_builder(ctx.live & np.isfinite(z), np.nan_to_num(z))
        for stat, z in _parity_z(ctx).items()
    }


def cohort_parity(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
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
        out[MetricId(g.id, stat)] = two_means_builder(valid, np.nan_to_num(z))
    return out


def parity_control(ctx: Context, acc: Acc) -> dict[tuple[str, str], CellStats]:
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
            out[Cell(MetricId(g.id, stat), ALL)] = mean(acc, valid, np.nan_to_num(z), None)
    return out
