"""The load bands from pair columns: the primary's log-ratio per band of the candidate's load.

`bands` builds the shadow gate's `BandStats` (the gain per band, and both routes' loads
summed over the same pairs); `band_labels` names the bands, for replay and the fold alike.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from gate.db.enums import RolloutMode
from gate.stats.columns import BASE, CAND, Acc, Context, log_ratio, mean
from gate.stats.gate_stats import BandStats
from gate.stats.registry import Family, banded


def bands(ctx: Context, acc: Acc, mode: RolloutMode, next_share: float | None) -> BandStats | None:
    """Return the primary's paired log-ratio per band of the candidate's load (shadow).

    A pair counts in a band when both routes' loads are known; its band is where the
    candidate's running requests fall among the policy's edges.
    """
    policy, cols = ctx.policy, ctx.cols
    g = banded(policy)
    if g is None or g.family(mode) is not Family.BAND or cols.load is None:
        return None
    primary = {"tpot": cols.tpot, "e2e": cols.e2e}[policy.primary.metric]
    lr = log_ratio(primary)
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
        gains.append(mean(acc, member, lr, None))
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
