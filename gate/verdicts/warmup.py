"""What a stage's warm-up pairs fix for the Postgres fold, by SQL over their slice.

`warmup` reads the warm-up slice once: each exceedance guardrail's tail thresholds
(per declared segment and pooled), each acceptance-collapse detector's level, and each
sampled-output parity statistic's scale (`gate.stats.parity_cells.parity_scale`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

from gate.pairs.parity import PARTIAL
from gate.parity import STATISTICS
from gate.stats.ids import ALL, UNDECLARED
from gate.stats.incremental import POOLED_ONLY, Tail, WarmUp, folded
from gate.stats.parity_cells import parity_scale
from gate.stats.policy import Policy
from gate.stats.registry import Family, Source
from gate.verdicts.slices import SLICE, Slice, difference

_THRESHOLDS = (
    SLICE
    + """, w AS (
  SELECT seg, b_{m} AS v FROM y
  WHERE warm AND NOT dropped AND NOT is_control AND NOT b_failed AND b_{m} IS NOT NULL
), med AS (
  SELECT seg, percentile_cont(0.5) WITHIN GROUP (ORDER BY v) AS m FROM w GROUP BY seg
), pooled AS (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY v) AS m FROM w)
SELECT med.seg, med.m AS seg_median, pooled.m AS pooled_median,
       (SELECT percentile_cont(:q) WITHIN GROUP (ORDER BY w.v / CASE
          WHEN w.seg = ANY(CAST(:segments AS text[])) THEN m2.m ELSE pooled.m END)
        FROM w JOIN med m2 ON m2.seg = w.seg) AS ratio_q
FROM pooled LEFT JOIN med ON true
"""
)
# The collapse detectors' levels: from each episode's first pair only, as they read; never
# a dropped pair's (its candidate may land after the level is fixed: replay would read it).
_WARM_ACCEPTANCE = SLICE + (
    "SELECT seg, count(acc) AS n, coalesce(sum(acc), 0) AS s FROM y"
    " WHERE warm AND opens AND NOT dropped\nGROUP BY seg"
)


def warmup(session: Session, piece: Slice, policy: Policy) -> WarmUp:
    """Return what the warm-up pairs (the slice, all warm) fix: thresholds and levels."""
    params = piece.params(policy)
    g = policy.guardrails
    tails = {
        r.id: _tail(session, params, r.source.value, r.quantile(policy), policy.segments)
        for r in folded()
        if r.shadow is Family.EXCEEDANCE and r.quantile is not None
    }
    ttft, e2e = tails.pop("ttft_tail", Tail({}, None)), tails.pop("e2e_tail", Tail({}, None))
    rows = session.execute(text(_WARM_ACCEPTANCE), params).all()
    n, total = sum(r.n for r in rows), sum(float(r.s) for r in rows)
    # As `cumulative`: a segment without warm-up acceptance takes the pooled mean.
    pooled = total / max(n, 1)
    means = {r.seg: float(r.s) / r.n for r in rows if r.n}
    ratio = g.acceptance.collapse_ratio
    # The pooled detector's level is the pooled mean; the undeclared one's the mean of the
    # undeclared segments' bucket (`POOLED_ONLY`), else the pooled mean.
    levels = {s: ratio * means.get(s, pooled) for s in policy.segments}
    levels[ALL] = ratio * pooled
    levels[UNDECLARED] = ratio * means.get(POOLED_ONLY, pooled)
    return WarmUp(ttft, e2e, levels, tails, _parity_scales(session, params, policy))


_WARM_PARITY = (
    SLICE + f"SELECT is_control, parity ? '{PARTIAL}' AS partial, {{d}} FROM y"
    " WHERE warm AND NOT dropped ORDER BY evaluated_at, id"
)


def _parity_scales(session: Session, params: dict[str, Any], policy: Policy) -> dict[str, float]:
    """Return each parity statistic's scale from the warm-up's differences (see parity_cells)."""
    if not any(g.source is Source.PARITY for g in folded()):
        return {}
    columns = ", ".join(f"{difference(stat)} AS d{i}" for i, stat in enumerate(STATISTICS))
    rows = session.execute(text(_WARM_PARITY.replace("{d}", columns)), params).all()
    control = np.asarray([r.is_control for r in rows], dtype=bool)
    partial = np.asarray([bool(r.partial) for r in rows], dtype=bool)
    least = policy.guardrails.output_parity.min_scale_pairs
    scales = {}
    for i, stat in enumerate(STATISTICS):
        d = np.asarray([np.nan if r[i + 2] is None else r[i + 2] for r in rows], dtype=np.float64)
        spoiled = partial if stat == "mean_logprob" else np.zeros_like(partial)
        scale = float(parity_scale(d, np.isfinite(d), control, least, spoiled=spoiled)[0])
        if np.isfinite(scale):
            scales[stat] = scale
    return scales


def _tail(
    session: Session, params: dict[str, Any], metric: str, q: float, segments: list[str]
) -> Tail:
    """Return each declared segment's tail threshold and the pooled one (see guardrail_cells)."""
    rows = session.execute(text(_THRESHOLDS.replace("{m}", metric)), {**params, "q": q}).all()
    if not rows or rows[0].ratio_q is None:
        return Tail({}, None)
    ratio_q, pooled = float(rows[0].ratio_q), float(rows[0].pooled_median)
    medians = {r.seg: float(r.seg_median) for r in rows if r.seg in segments}
    return Tail({seg: m * ratio_q for seg, m in medians.items()}, pooled * ratio_q)
