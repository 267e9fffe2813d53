"""The gate's statistics of a slice of a stage's pairs, by SQL aggregates (Postgres, shadow).

A slice is the stage's closed pairs after one key and up to another in fold order
(`evaluated_at`, `id`), each joined to its baseline generation and to its second one
(cohort `candidate`, or `control` for baseline-vs-baseline pairs) and to their
evaluations. `gate.verdicts.folds` folds each new slice into the stored state
(`gate.stats.incremental`, pure); every query reads only the slice, through the index on
(rollout_id, stage, evaluated_at, id). Assumptions: one generation per cohort per pair; an
evaluator with several results (versions) for one generation passes only if all of them
passed. Sampled-output parity reads each pair's differences, stored when it was stamped
(`gate.pairs.parity`), so eligibility is judged once, in Python (`gate.parity`). The load
bands read each pair's loads, likewise stored when it was stamped (`gate.pairs.load`).
Not here: canary mode (unpaired cohorts), user feedback.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

from gate.db.enums import Outcome, sql_statuses
from gate.pairs.parity import PARTIAL
from gate.parity import STATISTICS
from gate.stats.cumulative import parity_scale
from gate.stats.ids import ALL, UNDECLARED
from gate.stats.incremental import (
    POOLED_ONLY,
    BandSums,
    Bucket,
    Delta,
    Key,
    Tail,
    WarmUp,
    folded,
    metrics,
)
from gate.stats.policy import Policy
from gate.stats.registry import Family, Guardrail, Source, collapse_segments
from gate.stats.rule import CellStats
from gate.stats.sequences import (
    LOG_RATIO_CLIP,
    CountStats,
    FloatArray,
    MeanStats,
    PairedCounts,
    TwoCounts,
)

# Below every real key: the lower end of the first slice, the warm-up end of none.
_NO_KEY: Key = (datetime(1970, 1, 1, tzinfo=UTC), uuid.UUID(int=0))


@dataclass(frozen=True)
class Slice:
    """The pairs of one stage after `after` up to `upto`; those up to `warm_upto` are warm."""

    rollout_id: int
    stage: int
    after: Key | None
    upto: Key
    warm_upto: Key | None = None

    def params(self, policy: Policy) -> dict[str, Any]:
        """Return the bind parameters every slice query takes."""
        (after_at, after_id), (warm_at, warm_id) = self.after or _NO_KEY, self.warm_upto or _NO_KEY
        return {
            "rollout": self.rollout_id,
            "stage": self.stage,
            "after_at": after_at,
            "after_id": after_id,
            "upto_at": self.upto[0],
            "upto_id": self.upto[1],
            "warm_at": warm_at,
            "warm_id": warm_id,
            "segments": list(policy.segments),
            "pooled_only": POOLED_ONLY,
            "clip": LOG_RATIO_CLIP,
            "greedy": policy.guardrails.greedy_mismatch.evaluator,
        }


# The one outcome definition (`gate.db.enums`): a side no route is answerable for drops
# the pair (the data-quality line); a route failure fails every metric of its side.
_UNATTRIBUTABLE = sql_statuses(Outcome.NOT_ATTRIBUTABLE)
_ROUTE_FAILURE = sql_statuses(Outcome.ROUTE_FAILURE)
_STAGE = "rollout_id = :rollout AND stage = :stage"
_RANGE = (
    "(evaluated_at, id) > (:after_at, :after_id) AND (evaluated_at, id) <= (:upto_at, :upto_id)"
)
_SLICE = f"""
WITH p AS (
  SELECT id, is_control, state, created_at, evaluated_at, parity, baseline_load, candidate_load,
         CASE WHEN segment = ANY(CAST(:segments AS text[])) THEN segment
              ELSE :pooled_only END AS seg,
         (evaluated_at, id) <= (:warm_at, :warm_id) AS warm
  FROM pairs WHERE {_STAGE} AND state IN ('complete', 'dropped') AND {_RANGE}
), x AS (
  SELECT p.id, p.seg, p.is_control, p.created_at, p.evaluated_at, p.warm, p.parity,
         p.baseline_load, p.candidate_load,
         (p.state = 'dropped' OR b.id IS NULL OR c.id IS NULL
          OR b.status IN ({_UNATTRIBUTABLE}) OR c.status IN ({_UNATTRIBUTABLE})) AS dropped,
         b.id AS b_id, c.id AS c_id,
         b.status IN ({_ROUTE_FAILURE}) AS b_failed,
         c.status IN ({_ROUTE_FAILURE}) AS c_failed,
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

_LAST = f"""SELECT evaluated_at, id FROM pairs WHERE {_STAGE} AND evaluated_at <= :horizon
ORDER BY evaluated_at DESC, id DESC LIMIT 1"""
_NEXT = f"""SELECT evaluated_at, id FROM pairs
WHERE {_STAGE} AND state IN ('complete', 'dropped') AND {_RANGE}
ORDER BY evaluated_at, id LIMIT :limit"""


def last_key(session: Session, *, rollout_id: int, stage: int, horizon: datetime) -> Key | None:
    """Return the last pair stamped at or before `horizon`, in fold order."""
    params = {"rollout": rollout_id, "stage": stage, "horizon": horizon}
    row = session.execute(text(_LAST), params).first()
    return None if row is None else (row[0], row[1])


def first_keys(session: Session, piece: Slice, policy: Policy, limit: int) -> list[Key]:
    """Return the first `limit` keys of the slice, in fold order."""
    params = {**piece.params(policy), "limit": limit}
    return [(at, pair_id) for at, pair_id in session.execute(text(_NEXT), params)]


_THRESHOLDS = (
    _SLICE
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
_WARM_ACCEPTANCE = (
    _SLICE
    + "SELECT seg, count(acc) AS n, coalesce(sum(acc), 0) AS s FROM y WHERE warm\nGROUP BY seg"
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


def _difference(stat: str) -> str:
    # A statistic's stored d (`Pair.parity`); NULL where the pair may not compare it.
    assert stat.isidentifier(), stat
    return f"CAST(parity ->> '{stat}' AS float)"


_WARM_PARITY = (
    _SLICE + f"SELECT is_control, parity ? '{PARTIAL}' AS partial, {{d}} FROM y"
    " WHERE warm AND NOT dropped ORDER BY evaluated_at, id"
)


def _parity_scales(session: Session, params: dict[str, Any], policy: Policy) -> dict[str, float]:
    """Return each parity statistic's scale from the warm-up's differences (see cumulative)."""
    if not any(g.source is Source.PARITY for g in folded()):
        return {}
    columns = ", ".join(f"{_difference(stat)} AS d{i}" for i, stat in enumerate(STATISTICS))
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
    """Return each declared segment's tail threshold and the pooled one (see cumulative)."""
    rows = session.execute(text(_THRESHOLDS.replace("{m}", metric)), {**params, "q": q}).all()
    if not rows or rows[0].ratio_q is None:
        return Tail({}, None)
    ratio_q, pooled = float(rows[0].ratio_q), float(rows[0].pooled_median)
    medians = {r.seg: float(r.seg_median) for r in rows if r.seg in segments}
    return Tail({seg: m * ratio_q for seg, m in medians.items()}, pooled * ratio_q)


def _threshold_case(name: str, tail: Tail | None) -> tuple[str, dict[str, Any]]:
    if tail is None or tail.pooled is None:
        return f"NULL::float AS thr_{name}", {}
    params: dict[str, Any] = {f"{name}_pooled": tail.pooled}
    cases = []
    for i, (seg, value) in enumerate(tail.segments.items()):
        params[f"{name}_seg{i}"], params[f"{name}_thr{i}"] = seg, value
        cases.append(f"WHEN seg = :{name}_seg{i} THEN :{name}_thr{i}")
    body = f"CASE {' '.join(cases)} ELSE :{name}_pooled END" if cases else f":{name}_pooled"
    return f"CAST({body} AS float) AS thr_{name}", params


def _log_ratio(column: str, alias: str) -> str:
    # Computed once per row; NULL unless the pair is live, both sides ok and positive.
    ok = f"live AND both_ok AND b_{column} > 0 AND c_{column} > 0"
    lr = f"least(greatest(ln(c_{column} / b_{column}), -:clip), :clip)"
    return f"CASE WHEN {ok} THEN {lr} END AS lr_{alias}"


def _ratio(alias: str) -> str:
    lr = f"lr_{alias}"
    return (
        f"count({lr}) AS {alias}_n, coalesce(sum({lr}), 0) AS {alias}_s, "
        f"coalesce(sum({lr} * {lr}), 0) AS {alias}_ss"
    )


def _paired(name: str, bad_b: str, bad_c: str, valid: str = "live") -> str:
    return (
        f"count(*) FILTER (WHERE {valid}) AS {name}_n, "
        f"count(*) FILTER (WHERE {valid} AND ({bad_c}) AND NOT ({bad_b})) AS {name}_worse, "
        f"count(*) FILTER (WHERE {valid} AND ({bad_b}) AND NOT ({bad_c})) AS {name}_better"
    )


def _exceeds(side: str, column: str, alias: str) -> str:
    # NULL thresholds (no warm-up data) leave the comparison NULL: not counted.
    return f"({side}_failed OR coalesce({side}_{column} > thr_{alias}, false))"


_ACCEPTANCE = (
    "count(acc) FILTER (WHERE live) AS {a}_n, coalesce(sum(acc) FILTER (WHERE live), 0) AS {a}_s,"
    " coalesce(sum(acc * acc) FILTER (WHERE live), 0) AS {a}_ss"
)
_LATENCY = (Source.TTFT, Source.TPOT, Source.E2E)


@dataclass(frozen=True)
class _Part:
    """One guardrail's share of the slice query: row columns, aggregates, parameters."""

    columns: list[str]
    aggregates: str
    params: dict[str, Any]


def _part(g: Guardrail, alias: str, warm: WarmUp | None) -> _Part:
    """Return the SQL that builds one guardrail's statistics (see `foldable`)."""
    column = g.source.value
    if g.shadow is Family.PAIRED_LOG_RATIO:
        return _Part([_log_ratio(column, alias)], _ratio(alias), {})
    if g.shadow is Family.EXCEEDANCE:
        threshold, params = _threshold_case(alias, warm.tail(g.id) if warm else None)
        valid = f"live AND thr_{alias} IS NOT NULL"
        bad_b, bad_c = _exceeds("b", column, alias), _exceeds("c", column, alias)
        return _Part([threshold], _paired(alias, bad_b, bad_c, valid), params)
    if g.source is Source.FAILED:
        return _Part([], _paired(alias, "b_failed", "c_failed"), {})
    if g.source is Source.ACCEPTANCE:
        return _Part([], _ACCEPTANCE.replace("{a}", alias), {})
    if g.source is Source.PARITY:
        return _Part(*_parity(alias), {})
    raise AssertionError(f"not foldable: {g.id}")


def foldable(g: Guardrail) -> bool:
    """Return whether the fold's SQL computes a shadow guardrail (else the gate replays)."""
    return (g.source, g.shadow) in _FOLDABLE


def _parity(alias: str) -> tuple[list[str], str]:
    """Return the raw sums of d per statistic: live pairs, and the control slice's."""
    columns = [f"{_difference(stat)} AS {alias}_d{i}" for i, stat in enumerate(STATISTICS)]
    sums = [f"count(*) FILTER (WHERE parity IS NOT NULL) AS {alias}_sampled"]
    for i in range(len(STATISTICS)):
        d = f"{alias}_d{i}"
        for key, valid in ((f"{alias}_{i}", "live"), (f"{alias}_{i}c", _CONTROL)):
            sums.append(
                f"count({d}) FILTER (WHERE {valid}) AS {key}_n, "
                f"coalesce(sum({d}) FILTER (WHERE {valid}), 0) AS {key}_s, "
                f"coalesce(sum({d} * {d}) FILTER (WHERE {valid}), 0) AS {key}_ss"
            )
    return columns, ",\n  ".join(sums)


def _bands(policy: Policy) -> _Part:
    """Return the load bands' sums: per band of the candidate's load, the primary's clipped
    log-ratio over live pairs with both loads known, and both routes' loads summed."""
    metric = policy.primary.metric
    assert metric.isidentifier(), metric
    # A pair's band: how many edges lie at or below the candidate's load (`_bands` there).
    band = (
        "CASE WHEN baseline_load IS NOT NULL AND candidate_load IS NOT NULL THEN "
        "width_bucket(candidate_load, CAST(:edges AS float8[])) END AS band"
    )
    sums = []
    for b in range(len(policy.guardrails.load_bands.edges) + 1):
        member = f"band = {b} AND lr_band IS NOT NULL"
        sums.append(
            f"count(lr_band) FILTER (WHERE band = {b}) AS band{b}_n, "
            f"coalesce(sum(lr_band) FILTER (WHERE {member}), 0) AS band{b}_s, "
            f"coalesce(sum(lr_band * lr_band) FILTER (WHERE {member}), 0) AS band{b}_ss, "
            f"coalesce(sum(candidate_load) FILTER (WHERE {member}), 0) AS band{b}_c, "
            f"coalesce(sum(baseline_load) FILTER (WHERE {member}), 0) AS band{b}_b"
        )
    params = {"edges": list(policy.guardrails.load_bands.edges)}
    return _Part([_log_ratio(metric, "band"), band], ",\n  ".join(sums), params)


def _band_sums(rows: Any, policy: Policy) -> tuple[BandSums, ...]:
    """Return the slice's load-band sums, pooled over its buckets."""

    def total(key: str) -> float:
        return sum(float(row[key]) for row in rows)

    return tuple(
        BandSums(
            MeanStats(total(f"band{b}_n"), total(f"band{b}_s"), total(f"band{b}_ss")),
            total(f"band{b}_c"),
            total(f"band{b}_b"),
        )
        for b in range(len(policy.guardrails.load_bands.edges) + 1)
    )


# The control slice's tested pairs (the data-quality alarm's).
_CONTROL = "NOT warm AND NOT dropped AND is_control"


_FOLDABLE = {
    *((src, Family.PAIRED_LOG_RATIO) for src in _LATENCY),
    *((src, Family.EXCEEDANCE) for src in _LATENCY),
    (Source.FAILED, Family.PAIRED_DIFFERENCE),
    (Source.ACCEPTANCE, Family.MEAN_FLOOR),
    (Source.GREEDY, Family.TWO_RATES),  # from the evaluator query
    (Source.PARITY, Family.PAIRED_MEAN),
}


def _in_main(g: Guardrail) -> bool:
    return g.source is not Source.GREEDY


def _main_query(parts: list[_Part]) -> str:
    columns = ", ".join(c for part in parts for c in part.columns)
    aggregates = ",\n  ".join(part.aggregates for part in parts)
    # `k`: each row's place in fold order, so the pooled series is merged from the buckets'.
    return f"""{_SLICE}, t AS (
  SELECT y.*, row_number() OVER (ORDER BY evaluated_at, id) AS k{", " + columns if columns else ""}
  FROM y)
SELECT seg, count(*) AS pairs, count(*) FILTER (WHERE warm) AS warm_n,
  count(*) FILTER (WHERE live) AS live_n, count(*) FILTER (WHERE NOT warm AND dropped) AS dropped_n,
  count(*) FILTER (WHERE live AND b_failed AND c_failed) AS both_failed_n,
  min(created_at) AS first_at, max(created_at) AS last_at,
  {aggregates},
  array_agg(acc ORDER BY evaluated_at, id)
    FILTER (WHERE live AND acc IS NOT NULL) AS acc_series,
  array_agg(k ORDER BY evaluated_at, id) FILTER (WHERE live AND acc IS NOT NULL) AS acc_order
FROM t GROUP BY seg"""


# One row per pair x evaluator with each side's result; both-failed ties are counted
# per bucket instead (`Bucket.both_failed`), so an evaluator first seen later gets them.
_EVALS = (
    _SLICE
    + """, e AS (
  SELECT y.id, ev.evaluator,
         bool_and(ev.passed) FILTER (WHERE g.id = y.b_id) AS b_pass,
         bool_and(ev.passed) FILTER (WHERE g.id = y.c_id) AS c_pass
  FROM y JOIN generations g ON g.pair_id = y.id
  JOIN evaluations ev ON ev.generation_id = g.id
  GROUP BY y.id, ev.evaluator
), f AS (
  SELECT y.seg, y.is_control, y.b_failed, y.c_failed, e.evaluator, e.b_pass, e.c_pass,
         y.live AND NOT (y.b_failed AND y.c_failed)
           AND (e.b_pass IS NOT NULL OR y.b_failed) AND (e.c_pass IS NOT NULL OR y.c_failed)
           AS scored,
         NOT y.warm AND NOT y.dropped AND e.c_pass IS NOT NULL AS greedy
  FROM e JOIN y ON y.id = e.id
)
SELECT seg, evaluator, {paired},
  count(*) FILTER (WHERE greedy AND is_control) AS control_n,
  count(*) FILTER (WHERE greedy AND is_control AND NOT c_pass) AS control_k,
  count(*) FILTER (WHERE greedy AND NOT is_control) AS candidate_n,
  count(*) FILTER (WHERE greedy AND NOT is_control AND NOT c_pass) AS candidate_k
FROM f GROUP BY seg, evaluator
"""
).replace("{paired}", _paired("e", "b_failed OR NOT b_pass", "c_failed OR NOT c_pass", "scored"))


def delta(session: Session, piece: Slice, policy: Policy, warm: WarmUp | None) -> Delta:
    """Return the slice's statistics; `warm` holds the thresholds its live pairs use."""
    params = piece.params(policy)
    main = {f"g{i}": g for i, g in enumerate(folded()) if _in_main(g)}
    parts = [*(_part(g, alias, warm) for alias, g in main.items()), _bands(policy)]
    query = text(_main_query(parts))
    extra = {k: v for part in parts for k, v in part.params.items()}
    rows = session.execute(query, {**params, **extra}).mappings().all()
    buckets = {row["seg"]: _bucket(row, main) for row in rows}
    greedy = [g.id for g in folded() if g.source is Source.GREEDY]
    evaluators: dict[str, dict[str, PairedCounts]] = defaultdict(dict)
    for row in session.execute(text(_EVALS), params).mappings():
        if row["evaluator"] == params["greedy"]:
            control = CountStats(float(row["control_n"]), float(row["control_k"]))
            candidate = CountStats(float(row["candidate_n"]), float(row["candidate_k"]))
            b = buckets[row["seg"]]
            both = {name: TwoCounts(control, candidate) for name in greedy}
            buckets[row["seg"]] = Bucket(b.live, b.dropped, b.both_failed, {**b.cells, **both})
        else:
            evaluators[row["evaluator"]][row["seg"]] = _counts(row, "e")
    series = {_detector(row["seg"]): row["acc_series"] for row in rows}
    series[ALL] = _pooled_series(rows).tolist()
    return Delta(
        last=piece.upto,
        pairs=sum(row["pairs"] for row in rows),
        warm_pairs=sum(row["warm_n"] for row in rows),
        first_at=min((row["first_at"] for row in rows), default=None),
        last_at=max((row["last_at"] for row in rows), default=None),
        buckets=buckets,
        evaluators=dict(evaluators),
        acceptance={
            s: np.asarray(series.get(s) or [], dtype=np.float64) for s in collapse_segments(policy)
        },
        control=_control(rows, main),
        bands=_band_sums(rows, policy),
    )


def _control(rows: Any, main: dict[str, Guardrail]) -> dict[str, MeanStats]:
    """Return the slice's control parity cells, pooled over its buckets (once sampled)."""
    out: dict[str, MeanStats] = {}
    for alias, g in main.items():
        if g.source is not Source.PARITY or not any(row[f"{alias}_sampled"] for row in rows):
            continue
        for i, metric in enumerate(metrics(g)):
            key = f"{alias}_{i}c"
            n, s, ss = (sum(float(row[f"{key}_{k}"]) for row in rows) for k in ("n", "s", "ss"))
            out[metric] = MeanStats(n, s, ss)
    return out


def _pooled_series(rows: Any) -> FloatArray:
    """Return every live acceptance rate of the slice in fold order (the pooled detector's)."""
    rates = [np.asarray(r["acc_series"] or [], dtype=np.float64) for r in rows]
    order = [np.asarray(r["acc_order"] or [], dtype=np.int64) for r in rows]
    if not rates:
        return np.zeros(0)
    merged, places = np.concatenate(rates), np.concatenate(order)
    return np.asarray(merged[np.argsort(places, kind="stable")], dtype=np.float64)


def _detector(bucket: str) -> str:
    # The bucket of undeclared segments feeds the undeclared detector.
    return UNDECLARED if bucket == POOLED_ONLY else bucket


def _mean(row: Any, key: str) -> MeanStats:
    return MeanStats(float(row[f"{key}_n"]), float(row[f"{key}_s"]), float(row[f"{key}_ss"]))


def _counts(row: Any, name: str) -> PairedCounts:
    return PairedCounts(
        float(row[f"{name}_n"]), float(row[f"{name}_worse"]), float(row[f"{name}_better"])
    )


def _bucket(row: Any, main: dict[str, Guardrail]) -> Bucket:
    cells: dict[str, CellStats] = {}
    for alias, g in main.items():
        if g.source is Source.PARITY:
            cells.update(_parity_cells(row, alias, g))
            continue
        family = g.shadow
        counts = family in (Family.PAIRED_DIFFERENCE, Family.EXCEEDANCE)
        cells[g.id] = _counts(row, alias) if counts else _mean(row, alias)
    return Bucket(float(row["live_n"]), float(row["dropped_n"]), float(row["both_failed_n"]), cells)


def _parity_cells(row: Any, alias: str, g: Guardrail) -> dict[str, CellStats]:
    # Only once a pair of the bucket was sampled: replay has no parity cells before.
    if not row[f"{alias}_sampled"]:
        return {}
    return {metric: _mean(row, f"{alias}_{i}") for i, metric in enumerate(metrics(g))}
