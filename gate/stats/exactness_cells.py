"""Per-token exactness cells from pair columns: the candidate's tokens, and the control.

One cell, pooled: the tested candidate calls' summed bin shares (`TokenBins`). In shadow
the candidate side of each live pair whose call did not fail; in canary the candidate's
served calls. The baseline's own tokens (its calls asked for `top_logprobs`) form the
control cell, the data-quality alarm: the same test where no lossy sampler can be.
"""

from __future__ import annotations

import numpy as np

from gate.db.enums import RolloutMode
from gate.exactness_fit import BINS
from gate.stats.columns import BASE, CAND, Acc, Builder, Context
from gate.stats.exactness import TokenBins
from gate.stats.gate_stats import CellStats
from gate.stats.ids import ALL, Cell, MetricId
from gate.stats.registry import Guardrail, Source, tested
from gate.stats.sequences import BoolArray, FloatArray


def _sums(acc: Acc, valid: BoolArray, side: FloatArray, seg: int | None) -> TokenBins:
    """Return the cumulative sums of one side's stored statistics where `valid`."""
    usable = valid & np.isfinite(side[..., 0])
    # Components first: Acc sums along the pairs axis, which must come last.
    parts = np.moveaxis(np.where(usable[..., None], np.nan_to_num(side), 0.0), -1, 0)
    sums = acc(parts, seg)
    return TokenBins(
        sums[0], sums[1], tuple(sums[2 : 2 + BINS]), sums[2 + BINS], sums[3 + BINS], sums[4 + BINS]
    )


def _builder(valid: BoolArray, side: FloatArray) -> Builder:
    return lambda acc, seg: _sums(acc, valid, side, seg)


def candidate_tokens(ctx: Context, g: Guardrail) -> dict[MetricId, Builder]:
    """Return the exactness cell's builder: the candidate's tested calls."""
    x = ctx.cols.exactness
    if x is None:
        return {}
    valid = ctx.served[..., CAND] if ctx.canary else ctx.live & ~ctx.cols.failed[..., CAND]
    return {MetricId(g.id): _builder(np.asarray(valid, dtype=bool), x[..., CAND, :])}


def exactness_control(ctx: Context, acc: Acc) -> dict[tuple[str, str], CellStats]:
    """Return the baseline's own tokens' cell (pooled), for the data-quality alarm."""
    x = ctx.cols.exactness
    if x is None:
        return {}
    valid = ~ctx.warm & ~ctx.cols.dropped & ~ctx.cols.failed[..., BASE]
    out: dict[tuple[str, str], CellStats] = {}
    for g in tested(RolloutMode.SHADOW):
        if g.control_alarm and g.source is Source.EXACTNESS:
            out[Cell(MetricId(g.id), ALL)] = _sums(acc, valid, x[..., BASE, :], None)
    return out
