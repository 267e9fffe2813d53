"""The gate's sufficient statistics from the store, by SQL GROUP BY (Postgres, shadow mode).

One stage of one rollout: its complete and dropped pairs in `created_at` order, each
joined to its baseline generation and to its second generation (cohort `candidate`, or
`control` for baseline-vs-baseline pairs), and to their evaluations. The first
`policy.warmup_pairs` pairs are the warm-up, exactly as in `gate.stats.cumulative` (a
test checks that both give the same statistics). Assumptions: one generation per cohort
per pair; an evaluator with several results (versions) for one generation passes only if
all of them passed.

Not here yet: canary mode (unpaired cohorts), user feedback. The acceptance-collapse
statistic is computed in Python over the ordered acceptance series, which the query
returns (a periodic task may keep it incrementally instead, with `change.update`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

from gate.stats.change import log_evalues, log_sr_path
from gate.stats.engine import (
    ACCEPTANCE,
    E2E_TAIL,
    EVAL_PREFIX,
    FAILURES,
    GREEDY,
    TTFT_P50,
    TTFT_TAIL,
    CellStats,
    GateStats,
)
from gate.stats.policy import ALL, Policy
from gate.stats.sequences import LOG_RATIO_CLIP, CountStats, MeanStats, PairedCounts, TwoCounts

_PAIRS = """
WITH p AS (
  SELECT id, segment, is_control, state, created_at,
         row_number() OVER (ORDER BY created_at, id) AS seq
  FROM pairs WHERE rollout_id = :rollout AND stage = :stage AND state IN ('complete', 'dropped')
), x AS (
  SELECT p.id, p.segment AS seg, p.is_control, p.created_at, p.seq, p.seq <= :warmup AS warm,
         (p.state = 'dropped' OR b.id IS NULL OR c.id IS NULL
          OR b.status = 'dropped' OR c.status = 'dropped') AS dropped,
         b.id AS b_id, c.id AS c_id,
         b.status IN ('error', 'timeout', 'fallback') AS b_failed,
         c.status IN ('error', 'timeout', 'fallback') AS c_failed,
         b.ttft_s AS b_ttft, c.ttft_s AS c_ttft, b.tpot_s AS b_tpot, c.tpot_s AS c_tpot,
         b.e2e_s AS b_e2e, c.e2e_s AS c_e2e,
         CASE WHEN NOT p.is_control AND c.spec_draft_tokens > 0 THEN
           least(coalesce(c.spec_accepted_tokens, 0)::float / c.spec_draft_tokens, 1.0) END AS acc
  FROM p
  LEFT JOIN generations b ON b.pair_id = p.id AND b.cohort = 'baseline'
  LEFT JOIN generations c ON c.pair_id = p.id AND c.cohort IN ('candidate', 'control')
), y AS (
  SELECT x.*, NOT warm AND NOT dropped AND NOT is_control AS live,
         NOT b_failed AND NOT c_failed AS both_ok FROM x
)
"""


def _ratio(metric: str) -> str:
    lr = f"least(greatest(ln(c_{metric} / b_{metric}), -:clip), :clip)"
    ok = f"live AND both_ok AND b_{metric} > 0 AND c_{metric} > 0"
    return (
        f"count(*) FILTER (WHERE {ok}) AS {metric}_n, "
        f"coalesce(sum({lr}) FILTER (WHERE {ok}), 0) AS {metric}_s, "
        f"coalesce(sum({lr} * {lr}) FILTER (WHERE {ok}), 0) AS {metric}_ss"
    )


def _paired(name: str, bad_b: str, bad_c: str, valid: str = "live") -> str:
    return (
        f"count(*) FILTER (WHERE {valid}) AS {name}_n, "
        f"count(*) FILTER (WHERE {valid} AND ({bad_c}) AND NOT ({bad_b})) AS {name}_worse, "
        f"count(*) FILTER (WHERE {valid} AND ({bad_b}) AND NOT ({bad_c})) AS {name}_better"
    )


def _exceeds(side: str, metric: str) -> str:
    # NULL thresholds (no warm-up data) leave the comparison NULL: not counted.
    return f"({side}_failed OR coalesce({side}_{metric} > thr_{metric}, false))"


_THRESHOLDS = (
    _PAIRS
    + """, w AS (
  SELECT seg, b_{m} AS v FROM y
  WHERE warm AND NOT dropped AND NOT is_control AND NOT b_failed AND b_{m} IS NOT NULL
), med AS (
  SELECT seg, percentile_cont(0.5) WITHIN GROUP (ORDER BY v) AS m FROM w GROUP BY seg
), pooled AS (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY v) AS m FROM w)
SELECT med.seg, med.m AS seg_median, pooled.m AS pooled_median,
       (SELECT percentile_cont(:q) WITHIN GROUP (ORDER BY w.v / CASE
          WHEN w.seg = ANY(:segments) THEN m2.m ELSE pooled.m END)
        FROM w JOIN med m2 ON m2.seg = w.seg) AS ratio_q
FROM pooled LEFT JOIN med ON true
"""
)


def _thresholds(
    session: Session, params: dict[str, Any], metric: str, q: float, segments: list[str]
) -> tuple[dict[str, float], float | None]:
    """Return each declared segment's tail threshold and the pooled one (see cumulative)."""
    sql = _THRESHOLDS.replace("{m}", metric)
    rows = session.execute(text(sql), {**params, "q": q, "segments": segments}).all()
    if not rows or rows[0].ratio_q is None:
        return {}, None
    ratio_q, pooled = float(rows[0].ratio_q), float(rows[0].pooled_median)
    medians = {r.seg: float(r.seg_median) for r in rows if r.seg in segments}
    return {seg: m * ratio_q for seg, m in medians.items()}, pooled * ratio_q


def _threshold_case(
    name: str, per_segment: dict[str, float], pooled: float | None
) -> tuple[str, dict[str, Any]]:
    if pooled is None:
        return f"NULL::float AS thr_{name}", {}
    params: dict[str, Any] = {f"{name}_pooled": pooled}
    cases = []
    for i, (seg, value) in enumerate(per_segment.items()):
        params[f"{name}_seg{i}"], params[f"{name}_thr{i}"] = seg, value
        cases.append(f"WHEN seg = :{name}_seg{i} THEN :{name}_thr{i}")
    body = f"CASE {' '.join(cases)} ELSE :{name}_pooled END" if cases else f":{name}_pooled"
    return f"CAST({body} AS float) AS thr_{name}", params


def _main_query(thr_ttft: str, thr_e2e: str) -> str:
    ttft_tail = _paired(
        "ttft_tail", _exceeds("b", "ttft"), _exceeds("c", "ttft"), "live AND thr_ttft IS NOT NULL"
    )
    e2e_tail = _paired(
        "e2e_tail", _exceeds("b", "e2e"), _exceeds("c", "e2e"), "live AND thr_e2e IS NOT NULL"
    )
    return f"""{_PAIRS}, t AS (SELECT y.*, {thr_ttft}, {thr_e2e} FROM y)
SELECT seg, count(*) FILTER (WHERE live) AS live_n,
  count(*) FILTER (WHERE NOT warm AND dropped) AS dropped_n, count(*) AS total_n,
  min(created_at) AS first_at, max(created_at) AS last_at,
  {_ratio("tpot")}, {_ratio("e2e")}, {_ratio("ttft")},
  {_paired("failures", "b_failed", "c_failed")}, {ttft_tail}, {e2e_tail},
  count(acc) FILTER (WHERE live) AS acc_n, coalesce(sum(acc) FILTER (WHERE live), 0) AS acc_s,
  coalesce(sum(acc * acc) FILTER (WHERE live), 0) AS acc_ss
FROM t GROUP BY seg"""


_EVALS = (
    _PAIRS
    + """, gens AS (SELECT b_id AS id FROM y UNION SELECT c_id FROM y),
ev AS (
  SELECT generation_id, evaluator, bool_and(passed) AS passed FROM evaluations
  WHERE generation_id IN (SELECT id FROM gens) GROUP BY generation_id, evaluator
), names AS (SELECT DISTINCT evaluator FROM ev WHERE evaluator <> :greedy)
SELECT y.seg, n.evaluator, {paired}
FROM y CROSS JOIN names n
LEFT JOIN ev eb ON eb.generation_id = y.b_id AND eb.evaluator = n.evaluator
LEFT JOIN ev ec ON ec.generation_id = y.c_id AND ec.evaluator = n.evaluator
GROUP BY y.seg, n.evaluator
"""
).replace(
    "{paired}",
    _paired(
        "e",
        "y.b_failed OR NOT eb.passed",
        "y.c_failed OR NOT ec.passed",
        "y.live AND (eb.passed IS NOT NULL OR y.b_failed)"
        " AND (ec.passed IS NOT NULL OR y.c_failed)",
    ),
)

_GREEDY = (
    _PAIRS
    + """SELECT y.seg, y.is_control, count(*) AS n, count(*) FILTER (WHERE NOT g.passed) AS k
FROM y JOIN (
  SELECT generation_id, bool_and(passed) AS passed FROM evaluations
  WHERE evaluator = :greedy GROUP BY generation_id
) g ON g.generation_id = y.c_id
WHERE NOT y.warm AND NOT y.dropped GROUP BY y.seg, y.is_control
"""
)

_ACCEPTANCE = _PAIRS + "SELECT seg, warm, live, acc FROM y WHERE acc IS NOT NULL ORDER BY seq"


def load_stats(session: Session, *, rollout_id: int, stage: int, policy: Policy) -> GateStats:
    """Return the stage's sufficient statistics, as `cumulative.to_stats` would at its end."""
    params: dict[str, Any] = {
        "rollout": rollout_id,
        "stage": stage,
        "warmup": policy.warmup_pairs,
        "clip": LOG_RATIO_CLIP,
        "greedy": policy.guardrails.greedy_mismatch.evaluator,
    }
    g, segments = policy.guardrails, policy.segments
    cases = [
        _threshold_case(name, *_thresholds(session, params, name, q, segments))
        for name, q in (("ttft", g.ttft_tail.quantile), ("e2e", g.e2e_tail.quantile))
    ]
    sql = _main_query(cases[0][0], cases[1][0])
    rows = session.execute(text(sql), {**params, **cases[0][1], **cases[1][1]}).mappings().all()
    cells: dict[tuple[str, str], CellStats] = {}
    for seg, row in _by_segment(rows, segments).items():
        for metric, key in (("tpot", "tpot"), ("e2e", "e2e"), (TTFT_P50, "ttft")):
            cells[(metric, seg)] = MeanStats(row[f"{key}_n"], row[f"{key}_s"], row[f"{key}_ss"])
        for metric in (FAILURES, TTFT_TAIL, E2E_TAIL):
            cells[(metric, seg)] = _counts(row, metric)
        cells[(ACCEPTANCE, seg)] = MeanStats(row["acc_n"], row["acc_s"], row["acc_ss"])
    cells.update(_eval_cells(session, params, segments))
    cells.update(_greedy_cells(session, params, segments))
    pooled = _by_segment(rows, segments)[ALL]
    first, last = (
        (min(r["first_at"] for r in rows), max(r["last_at"] for r in rows))
        if rows
        else (None, None)
    )
    return GateStats(
        cells=cells,
        n_pairs=float(pooled["live_n"]),
        n_dropped=float(pooled["dropped_n"]),
        elapsed_s=(last - first).total_seconds() if first and last else 0.0,
        warmed_up=bool(pooled["total_n"] > policy.warmup_pairs),
        collapse=_collapse(session, params, policy),
    )


def _by_segment(rows: Any, segments: list[str]) -> dict[str, dict[str, float]]:
    # Declared segments as they are (zeros if absent); every row, declared or not, in `all`.
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        for seg in (ALL, row["seg"]) if row["seg"] in segments else (ALL,):
            for key, value in row.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    out[seg][key] += float(value)
    return {seg: dict(out[seg]) for seg in (ALL, *segments)}


def _counts(row: dict[str, float], name: str) -> PairedCounts:
    return PairedCounts(
        row.get(f"{name}_n", 0.0), row.get(f"{name}_worse", 0.0), row.get(f"{name}_better", 0.0)
    )


def _eval_cells(
    session: Session, params: dict[str, Any], segments: list[str]
) -> dict[tuple[str, str], CellStats]:
    by_name: dict[str, list[Any]] = defaultdict(list)
    for row in session.execute(text(_EVALS), params).mappings():
        by_name[row["evaluator"]].append(row)
    cells: dict[tuple[str, str], CellStats] = {}
    for name, rows in by_name.items():
        for seg, sums in _by_segment(rows, segments).items():
            cells[(EVAL_PREFIX + name, seg)] = _counts(sums, "e")
    return cells


def _greedy_cells(
    session: Session, params: dict[str, Any], segments: list[str]
) -> dict[tuple[str, str], CellStats]:
    rows = session.execute(text(_GREEDY), params).mappings().all()
    sums: dict[tuple[str, bool], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        for seg in (ALL, row["seg"]) if row["seg"] in segments else (ALL,):
            sums[(seg, row["is_control"])][0] += row["n"]
            sums[(seg, row["is_control"])][1] += row["k"]
    return {
        (GREEDY, seg): TwoCounts(CountStats(*sums[(seg, True)]), CountStats(*sums[(seg, False)]))
        for seg in (ALL, *segments)
    }


def _collapse(session: Session, params: dict[str, Any], policy: Policy) -> dict[str, float]:
    g = policy.guardrails.acceptance
    if not g.enabled:
        return {}
    rows = session.execute(text(_ACCEPTANCE), params).all()
    warm_all = [r.acc for r in rows if r.warm]
    pooled = float(np.mean(warm_all)) if warm_all else 0.0
    out = {}
    for seg in policy.segments:
        warm = [r.acc for r in rows if r.warm and r.seg == seg]
        level = g.collapse_ratio * (float(np.mean(warm)) if warm else pooled)
        live = np.array([r.acc for r in rows if r.live and r.seg == seg], dtype=np.float64)
        path = log_sr_path(log_evalues(live, level)) if live.size else np.array([-np.inf])
        out[seg] = float(path.max())
    return out
