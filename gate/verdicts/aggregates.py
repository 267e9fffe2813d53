"""The SQL aggregates of a new slice of pairs, and the `Delta` they fold into the state.

Each foldable shadow guardrail adds its share to one query over the slice (`Part`: row
columns, aggregates, parameters), with the load bands' sums; a second query counts the
evaluators' paired results and the greedy-parity rates. `delta` reads the rows back into
per-bucket cells, the control slice's parity cells and the acceptance series.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

from gate.exactness_fit import BINS
from gate.parity import STATISTICS
from gate.stats.exactness import TokenBins
from gate.stats.gate_stats import CellStats
from gate.stats.ids import ALL, UNDECLARED
from gate.stats.incremental import (
    POOLED_ONLY,
    BandSums,
    Bucket,
    Delta,
    Tail,
    WarmUp,
    folded,
    metrics,
    plus,
)
from gate.stats.policy import Policy
from gate.stats.registry import Family, Guardrail, Source, collapse_segments
from gate.stats.sequences import CountStats, FloatArray, MeanStats, PairedCounts, TwoCounts
from gate.verdicts.slices import SLICE, Slice, calls_since, difference, evaluations_since


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


def exceeds(side: str, column: str, alias: str) -> str:
    # NULL thresholds (no warm-up data) leave the comparison NULL: not counted.
    return f"({side}_failed OR coalesce({side}_{column} > thr_{alias}, false))"


_ACCEPTANCE = (
    "count(acc) FILTER (WHERE live) AS {a}_n, coalesce(sum(acc) FILTER (WHERE live), 0) AS {a}_s,"
    " coalesce(sum(acc * acc) FILTER (WHERE live), 0) AS {a}_ss"
)
_LATENCY = (Source.TTFT, Source.TPOT, Source.E2E)
# The loop guardrail's pairs: live, neither side failed, the signature readable.
LOOP_VALID = "live AND both_ok AND c_loop IS NOT NULL"


@dataclass(frozen=True)
class Part:
    """One guardrail's share of the slice query: row columns, aggregates, parameters."""

    columns: list[str]
    aggregates: str
    params: dict[str, Any]


def part(g: Guardrail, alias: str, warm: WarmUp | None) -> Part:
    """Return the SQL that builds one guardrail's statistics (see `foldable`)."""
    column = g.source.value
    if g.shadow is Family.PAIRED_LOG_RATIO:
        return Part([_log_ratio(column, alias)], _ratio(alias), {})
    if g.shadow is Family.EXCEEDANCE:
        threshold, params = _threshold_case(alias, warm.tail(g.id) if warm else None)
        valid = f"live AND thr_{alias} IS NOT NULL"
        bad_b, bad_c = exceeds("b", column, alias), exceeds("c", column, alias)
        return Part([threshold], _paired(alias, bad_b, bad_c, valid), params)
    if g.source is Source.FAILED:
        return Part([], _paired(alias, "b_failed", "c_failed"), {})
    if g.source is Source.ACCEPTANCE:
        return Part([], _ACCEPTANCE.replace("{a}", alias), {})
    if g.source is Source.LOOP:
        return Part([], _paired(alias, "b_loop", "c_loop", LOOP_VALID), {})
    if g.source is Source.PARITY:
        return Part(*_parity(alias), {})
    if g.source is Source.EXACTNESS:
        return Part([], _exactness(alias), {})
    raise AssertionError(f"not foldable: {g.id}")


def foldable(g: Guardrail) -> bool:
    """Return whether the fold's SQL computes a shadow guardrail (else the gate replays)."""
    return (g.source, g.shadow) in _FOLDABLE


def _parity(alias: str) -> tuple[list[str], str]:
    """Return the raw sums of d per statistic: live pairs, and the control slice's."""
    columns = [f"{difference(stat)} AS {alias}_d{i}" for i, stat in enumerate(STATISTICS)]
    sums = [f"count(*) FILTER (WHERE parity IS NOT NULL) AS {alias}_sampled"]
    for i in range(len(STATISTICS)):
        d = f"{alias}_d{i}"
        for key, valid in ((f"{alias}_{i}", "live"), (f"{alias}_{i}c", CONTROL)):
            sums.append(
                f"count({d}) FILTER (WHERE {valid}) AS {key}_n, "
                f"coalesce(sum({d}) FILTER (WHERE {valid}), 0) AS {key}_s, "
                f"coalesce(sum({d} * {d}) FILTER (WHERE {valid}), 0) AS {key}_ss"
            )
    return columns, ",\n  ".join(sums)


# The tested calls, as replay reads them (`gate.stats.exactness_cells`): the candidate's
# side of live pairs that did not fail; the control, every baseline call past warm-up.
_EXACT_SIDES = (("c", "live AND NOT c_failed"), ("b", "NOT warm AND NOT dropped AND NOT b_failed"))


def _exactness(alias: str) -> str:
    """Return the sums of each side's stored exactness statistics (`TokenFit`)."""
    # Any side of any pair tested: replay's cells exist from then on (warm-up included).
    sums = [f"count(*) FILTER (WHERE b_exact IS NOT NULL OR c_exact IS NOT NULL) AS {alias}_any"]
    for side, valid in _EXACT_SIDES:
        column = f"{side}_exact"
        parts = [("n", f"{column} ->> 'n'"), ("cut", f"{column} ->> 'cut'")]
        parts += [(f"b{b}", f"{column} -> 'bins' ->> {b}") for b in range(BINS)]
        # Stored before the most-likely test's sums (or its squares): 0, as if never seen.
        parts += [
            (key, f"coalesce({column} ->> '{key}', '0')") for key in ("off", "off_p", "off_p2")
        ]
        name = f"{alias}_{side}"
        sums += [
            f"coalesce(sum(CAST({expr} AS float)) FILTER (WHERE {valid}), 0) AS {name}_{key}"
            for key, expr in parts
        ]
    return ",\n  ".join(sums)


def _token_bins(row: Any, alias: str, side: str) -> TokenBins:
    key = f"{alias}_{side}"
    bins = tuple(float(row[f"{key}_b{b}"]) for b in range(BINS))
    off, off_p, off_p2 = (float(row[f"{key}_{k}"]) for k in ("off", "off_p", "off_p2"))
    return TokenBins(float(row[f"{key}_n"]), float(row[f"{key}_cut"]), bins, off, off_p, off_p2)


def band_part(policy: Policy) -> Part:
    """Return the load bands' sums: per band of the candidate's load, the primary's clipped
    log-ratio over live pairs with both loads known, and both routes' loads summed."""
    metric = policy.primary.metric
    assert metric.isidentifier(), metric
    # A pair's band: how many edges lie at or below the candidate's load (`load_bands.bands`).
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
    return Part([_log_ratio(metric, "band"), band], ",\n  ".join(sums), params)


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
CONTROL = "NOT warm AND NOT dropped AND is_control"


_FOLDABLE = {
    *((src, Family.PAIRED_LOG_RATIO) for src in _LATENCY),
    *((src, Family.EXCEEDANCE) for src in _LATENCY),
    (Source.FAILED, Family.PAIRED_DIFFERENCE),
    (Source.ACCEPTANCE, Family.MEAN_FLOOR),
    (Source.LOOP, Family.PAIRED_DIFFERENCE),
    (Source.GREEDY, Family.TWO_RATES),  # from the evaluator query
    (Source.PARITY, Family.PAIRED_MEAN),
    (Source.EXACTNESS, Family.TOKEN_PIT),
}


def in_main(g: Guardrail) -> bool:
    return g.source is not Source.GREEDY


def _main_query(parts: list[Part]) -> str:
    columns = ", ".join(c for part in parts for c in part.columns)
    aggregates = ",\n  ".join(part.aggregates for part in parts)
    # `k`: each row's place in fold order, so the pooled series is merged from the buckets'.
    return f"""{SLICE}, t AS (
  SELECT y.*, row_number() OVER (ORDER BY evaluated_at, id) AS k{", " + columns if columns else ""}
  FROM y)
SELECT seg, count(*) AS pairs, count(*) FILTER (WHERE warm) AS warm_n,
  count(*) FILTER (WHERE live) AS live_n, count(*) FILTER (WHERE NOT warm AND dropped) AS dropped_n,
  count(*) FILTER (WHERE live AND b_failed AND c_failed) AS both_failed_n,
  count(*) FILTER (WHERE unmatched) AS unmatched_n,
  count(*) FILTER (WHERE episode IS NOT NULL) AS named_n,
  min(created_at) AS first_at, max(created_at) AS last_at,
  {aggregates},
  array_agg(acc ORDER BY evaluated_at, id)
    FILTER (WHERE live AND opens AND acc IS NOT NULL) AS acc_series,
  array_agg(k ORDER BY evaluated_at, id)
    FILTER (WHERE live AND opens AND acc IS NOT NULL) AS acc_order
FROM t GROUP BY seg"""


# One row per pair x evaluator with each side's result; both-failed ties are counted
# per bucket instead (`Bucket.both_failed`), so an evaluator first seen later gets them.
# Per pair and evaluator, each side's result (passes only if every result passed).
EVALUATIONS = f""", e AS (
  SELECT y.id, ev.evaluator,
         bool_and(ev.passed) FILTER (WHERE g.id = y.b_id) AS b_pass,
         bool_and(ev.passed) FILTER (WHERE g.id = y.c_id) AS c_pass
  FROM y JOIN generations g ON g.pair_id = y.id AND {calls_since("g")}
  JOIN evaluations ev ON ev.generation_id = g.id AND {evaluations_since("ev")}
  GROUP BY y.id, ev.evaluator
)"""
_EVALS = (
    SLICE
    + EVALUATIONS
    + """, f AS (
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
    main = {f"g{i}": g for i, g in enumerate(folded()) if in_main(g)}
    parts = [*(part(g, alias, warm) for alias, g in main.items()), band_part(policy)]
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
            buckets[row["seg"]] = b.with_cells(both)
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
        named=sum(row["named_n"] for row in rows),
    )


def _control(rows: Any, main: dict[str, Guardrail]) -> dict[str, CellStats]:
    """Return the slice's control cells, pooled over its buckets: parity's (once sampled)
    and the baseline's own tokens' exactness (once a call was tested)."""
    out: dict[str, CellStats] = {}
    for alias, g in main.items():
        if g.source is Source.EXACTNESS:
            if any(row[f"{alias}_any"] for row in rows):
                out[g.id] = reduce(plus, (_token_bins(row, alias, "b") for row in rows))
            continue
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
        if g.source is Source.EXACTNESS:
            if row[f"{alias}_any"]:
                cells[g.id] = _token_bins(row, alias, "c")
            continue
        family = g.shadow
        counts = family in (Family.PAIRED_DIFFERENCE, Family.EXCEEDANCE)
        cells[g.id] = _counts(row, alias) if counts else _mean(row, alias)
    live, dropped, both = (float(row[k]) for k in ("live_n", "dropped_n", "both_failed_n"))
    return Bucket(live, dropped, both, cells, unmatched=float(row["unmatched_n"]))


def _parity_cells(row: Any, alias: str, g: Guardrail) -> dict[str, CellStats]:
    # Only once a pair of the bucket was sampled: replay has no parity cells before.
    if not row[f"{alias}_sampled"]:
        return {}
    return {metric: _mean(row, f"{alias}_{i}") for i, metric in enumerate(metrics(g))}
