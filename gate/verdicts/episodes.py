"""What a slice of pairs adds to the fold's episode sums (issue 39), in SQL.

A cell's episode sums (`gate.stats.episode_sums`) add over episodes, not pairs: a new pair
of an episode changes S_e^2 by 2 S_e x + x^2. So for the episodes a slice names, the
query also reads their earlier pairs of the stage (`EPISODE_SLICE`, through the index on
(rollout_id, stage, episode)), sums each episode's values before and in the slice (per
declared segment and pooled: GROUPING SETS), and adds, summed over episodes,
2 S_old S_new + S_new^2, S_old n_new + S_new n_old + S_new n_new, 2 n_old n_new + n_new^2,
and one episode where n_old is 0 and n_new is not. Earlier pairs are judged as when they
were folded: the same warm-up end, thresholds and load tolerance. A slice that names no
episode adds its plain sums (`alone`), with no query. Evaluators' cells count the pairs
where both sides failed as ties of every evaluator the stage has seen; an evaluator first
seen after such ties were folded refolds the stage (`gate.verdicts.folds`). Greedy
mismatch keeps each side's 0/1 outcomes (the control slice's, the candidate pairs'), per
segment and pooled, as two-proportion cells (`episode_sums.side_keys`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from gate.stats import episode_sums
from gate.stats.episode_sums import (
    LIVE,
    EpisodeSums,
    alone,
    band_key,
    control_key,
    side_keys,
)
from gate.stats.ids import ALL, MetricId
from gate.stats.incremental import POOLED_ONLY, Delta, WarmUp, folded, metrics
from gate.stats.policy import Policy
from gate.stats.registry import Family, Guardrail, Source
from gate.stats.sequences import MeanStats, PairedCounts, TwoCounts
from gate.verdicts.aggregates import (
    CONTROL,
    EVALUATIONS,
    LOOP_VALID,
    band_part,
    exceeds,
    in_main,
    part,
)
from gate.verdicts.slices import EPISODE_SLICE, Slice

Sums = dict[str, dict[str, EpisodeSums]]


@dataclass(frozen=True)
class _Value:
    """One cell's value per pair: where it is valid, and what it is (SQL)."""

    key: str
    valid: str
    x: str
    segmented: bool = True


def _difference(bad_b: str, bad_c: str) -> str:
    return (
        f"CASE WHEN ({bad_c}) AND NOT ({bad_b}) THEN 1.0 "
        f"WHEN ({bad_b}) AND NOT ({bad_c}) THEN -1.0 ELSE 0.0 END"
    )


def _guardrail_values(g: Guardrail, alias: str) -> list[_Value]:
    """Return a folded guardrail's per-pair values, as `aggregates.part` sums them."""
    if g.shadow is Family.PAIRED_LOG_RATIO:
        return [_Value(g.id, f"lr_{alias} IS NOT NULL", f"lr_{alias}")]
    if g.shadow is Family.EXCEEDANCE:
        column = g.source.value
        bad = _difference(exceeds("b", column, alias), exceeds("c", column, alias))
        return [_Value(g.id, f"live AND thr_{alias} IS NOT NULL", bad)]
    if g.source is Source.FAILED:
        return [_Value(g.id, "live", _difference("b_failed", "c_failed"))]
    if g.source is Source.ACCEPTANCE:
        return [_Value(g.id, "live AND acc IS NOT NULL", "acc")]
    if g.source is Source.LOOP:
        return [_Value(g.id, LOOP_VALID, _difference("b_loop", "c_loop"))]
    if g.source is Source.PARITY:
        out = []
        for i, metric in enumerate(metrics(g)):
            d = f"{alias}_d{i}"
            out.append(_Value(metric, f"live AND {d} IS NOT NULL", d))
            out.append(_Value(control_key(metric), f"{CONTROL} AND {d} IS NOT NULL", d, False))
        return out
    return []  # exactness: token bins, not a mean


def _plan(policy: Policy, warm: WarmUp | None) -> tuple[list[str], list[_Value], dict[str, Any]]:
    """Return the row columns, the values and the parameters of the main query."""
    main = {f"g{i}": g for i, g in enumerate(folded()) if in_main(g)}
    parts = [*(part(g, alias, warm) for alias, g in main.items()), band_part(policy)]
    values = [v for alias, g in main.items() for v in _guardrail_values(g, alias)]
    for b in range(len(policy.guardrails.load_bands.edges) + 1):
        values.append(_Value(band_key(b), f"band = {b} AND lr_band IS NOT NULL", "lr_band", False))
    values.append(_Value(LIVE, "live", "0.0", False))
    columns = [c for p in parts for c in p.columns]
    params = {k: v for p in parts for k, v in p.params.items()}
    return columns, values, params


def _per_pair(values: list[_Value]) -> str:
    return ",\n  ".join(
        f"CASE WHEN {v.valid} THEN 1.0 ELSE 0.0 END AS v{k}, "
        f"CASE WHEN {v.valid} THEN CAST({v.x} AS float8) ELSE 0.0 END AS x{k}"
        for k, v in enumerate(values)
    )


def _per_episode(count: int) -> str:
    return ",\n  ".join(
        f"sum(v{k}) FILTER (WHERE old) AS no{k}, sum(x{k}) FILTER (WHERE old) AS so{k}, "
        f"sum(v{k}) FILTER (WHERE NOT old) AS nn{k}, sum(x{k}) FILTER (WHERE NOT old) AS sn{k}"
        for k in range(count)
    )


def _added(count: int) -> str:
    out = []
    for k in range(count):
        no, so, nn, sn = (f"coalesce({s}{k}, 0)" for s in ("no", "so", "nn", "sn"))
        out.append(
            f"count(*) FILTER (WHERE {no} = 0 AND {nn} > 0) AS e{k}_g, "
            f"coalesce(sum(2 * {so} * {sn} + {sn} * {sn}), 0) AS e{k}_sq, "
            f"coalesce(sum({so} * {nn} + {sn} * {no} + {sn} * {nn}), 0) AS e{k}_cross, "
            f"coalesce(sum(2 * {no} * {nn} + {nn} * {nn}), 0) AS e{k}_nsq"
        )
    return ",\n  ".join(out)


def _main_query(columns: list[str], values: list[_Value]) -> str:
    extra = ", " + ", ".join(columns) if columns else ""
    return f"""{EPISODE_SLICE}, t AS (SELECT y.*{extra} FROM y
), v AS (
  SELECT coalesce(episode, CAST(id AS text)) AS ep, seg, old, episode IS NOT NULL AS named,
  {_per_pair(values)}
  FROM t
), g AS (
  SELECT GROUPING(seg) AS pooled, seg, ep, count(*) AS pairs, bool_or(named) AS named,
  {_per_episode(len(values))}
  FROM v GROUP BY GROUPING SETS ((seg, ep), (ep))
)
SELECT pooled, seg, coalesce(bool_or(named AND pairs > 1), false) AS shared,
  {_added(len(values))}
FROM g GROUP BY pooled, seg"""


_EVALUATOR_QUERY = f"""{EPISODE_SLICE}{EVALUATIONS}, r AS (
  SELECT coalesce(y.episode, CAST(y.id AS text)) AS ep, y.seg, y.old, n.evaluator,
         coalesce(y.live AND ((y.b_failed AND y.c_failed) OR
           ((e.b_pass IS NOT NULL OR y.b_failed) AND (e.c_pass IS NOT NULL OR y.c_failed))),
           false) AS valid,
         coalesce(y.b_failed OR NOT e.b_pass, false) AS bad_b,
         coalesce(y.c_failed OR NOT e.c_pass, false) AS bad_c
  FROM y CROSS JOIN unnest(CAST(:names AS text[])) AS n(evaluator)
  LEFT JOIN e ON e.id = y.id AND e.evaluator = n.evaluator
), v AS (
  SELECT ep, seg, old, evaluator, CASE WHEN valid THEN 1.0 ELSE 0.0 END AS v0,
         CASE WHEN valid THEN {_difference("bad_b", "bad_c")} ELSE 0.0 END AS x0
  FROM r
), g AS (
  SELECT evaluator, GROUPING(seg) AS pooled, seg, ep, {_per_episode(1)}
  FROM v GROUP BY GROUPING SETS ((evaluator, seg, ep), (evaluator, ep))
)
SELECT evaluator, pooled, seg, {_added(1)}
FROM g GROUP BY evaluator, pooled, seg"""


# Greedy pairs' mismatches, the control slice's (v0, x0) and the candidate pairs' (v1, x1)
# as 0/1 outcomes, as `aggregates._EVALS` counts them.
_GREEDY_QUERY = f"""{EPISODE_SLICE}{EVALUATIONS}, r AS (
  SELECT coalesce(y.episode, CAST(y.id AS text)) AS ep, y.seg, y.old, y.is_control,
         NOT e.c_pass AS bad
  FROM y JOIN e ON e.id = y.id AND e.evaluator = :greedy
  WHERE NOT y.warm AND NOT y.dropped AND e.c_pass IS NOT NULL
), v AS (
  SELECT ep, seg, old,
         CASE WHEN is_control THEN 1.0 ELSE 0.0 END AS v0,
         CASE WHEN is_control AND bad THEN 1.0 ELSE 0.0 END AS x0,
         CASE WHEN is_control THEN 0.0 ELSE 1.0 END AS v1,
         CASE WHEN NOT is_control AND bad THEN 1.0 ELSE 0.0 END AS x1
  FROM r
), g AS (
  SELECT GROUPING(seg) AS pooled, seg, ep, {_per_episode(2)}
  FROM v GROUP BY GROUPING SETS ((seg, ep), (ep))
)
SELECT pooled, seg, {_added(2)}
FROM g GROUP BY pooled, seg"""


def _sums(row: Any, k: int) -> EpisodeSums:
    fields = (f"e{k}_g", f"e{k}_sq", f"e{k}_cross", f"e{k}_nsq")
    return EpisodeSums(*(float(row[f]) for f in fields))


def _cell_segment(row: Any, policy: Policy) -> str | None:
    """Return the cell a result row is for: pooled, a declared segment, or none."""
    if row["pooled"]:
        return ALL
    return None if row["seg"] == POOLED_ONLY or row["seg"] not in policy.segments else row["seg"]


def added(
    session: Session,
    piece: Slice,
    policy: Policy,
    warm: WarmUp | None,
    *,
    delta: Delta,
    names: Iterable[str],
) -> tuple[Sums, bool]:
    """Return what the slice adds to the episode sums, and whether an episode it touches
    holds two pairs. `piece.warm_upto` must be the stage's warm-up end (pairs before the
    slice are read too); `names`: every evaluator the stage has seen."""
    names = sorted(set(names))
    if not delta.named:
        return _alone(delta, names, policy), False
    columns, values, extra = _plan(policy, warm)
    params = {**piece.params(policy), **extra}
    out: Sums = {}
    shared = False
    for row in session.execute(text(_main_query(columns, values)), params).mappings():
        shared = shared or bool(row["shared"])
        segment = _cell_segment(row, policy)
        for k, v in enumerate(values):
            if segment == ALL or (segment is not None and v.segmented):
                out.setdefault(v.key, {})[segment] = _sums(row, k)
    greedy = [g.id for g in folded() if g.source is Source.GREEDY]
    for row in session.execute(text(_GREEDY_QUERY), params).mappings() if greedy else ():
        segment = _cell_segment(row, policy)
        if segment is not None:
            for key in (key for metric in greedy for key in side_keys(metric)):
                k = int(key.startswith("candidate:"))  # v0/x0 the control slice, v1/x1 not
                out.setdefault(key, {})[segment] = _sums(row, k)
    if names:
        rows = session.execute(text(_EVALUATOR_QUERY), {**params, "names": names}).mappings()
        for row in rows:
            segment = _cell_segment(row, policy)
            if segment is not None:
                out.setdefault(MetricId("eval", row["evaluator"]), {})[segment] = _sums(row, 0)
    return out, shared


def _alone(delta: Delta, names: list[str], policy: Policy) -> Sums:
    """Return the episode sums of a slice whose pairs are each their own episode."""
    parts: list[tuple[str, str, EpisodeSums]] = []
    for bucket, b in delta.buckets.items():
        segments = [ALL] if bucket not in policy.segments else [bucket, ALL]
        cells: list[tuple[str, MeanStats | PairedCounts]] = [
            (key, c) for key, c in b.cells.items() if isinstance(c, MeanStats | PairedCounts)
        ]
        for key, c in b.cells.items():
            if isinstance(c, TwoCounts):  # greedy mismatch: each side's 0/1 outcomes
                sides = zip(side_keys(key), (c.baseline, c.candidate), strict=True)
                cells += [(k, episode_sums.outcomes(side)) for k, side in sides]
        for name in names:
            counts = delta.evaluators.get(name, {}).get(bucket, PairedCounts(0.0, 0.0, 0.0))
            with_ties = PairedCounts(counts.n + b.both_failed, counts.worse, counts.better)
            cells.append((MetricId("eval", name), with_ties))
        parts += [(key, seg, alone(c)) for key, c in cells for seg in segments]
        parts.append((LIVE, ALL, alone(MeanStats(b.live, 0.0, 0.0))))
    for metric, c in delta.control.items():
        if isinstance(c, MeanStats):
            parts.append((control_key(metric), ALL, alone(c)))
    parts += [(band_key(i), ALL, alone(band.gain)) for i, band in enumerate(delta.bands)]
    out: Mapping[str, Mapping[str, EpisodeSums]] = {}
    for key, seg, s in parts:
        out = episode_sums.merge(out, {key: {seg: s}})
    return {key: dict(per) for key, per in out.items()}
