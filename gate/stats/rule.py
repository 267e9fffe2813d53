"""The gate's decision rule, vectorised over any number of looks (and runs) at once.

`decide` (one look), `replay` (every look of a recorded rollout) and `simulate` (every
look of thousands of simulated rollouts) all call `apply_rule`, so the rule tested by
simulation is the rule that runs in production.

Rule, per look:
* kill when any guardrail x segment cell is proven inside its kill region (its lower
  bound, at alpha_kill / K, above `kill_at`; K is `registry.kill_slots`, one family more in
  canary mode for the cancel rate, so the union of all K tests has false-kill probability
  at most alpha_kill), or an acceptance collapse detector alarms (one per declared
  segment, one pooled over all requests, one pooled over undeclared segments; each takes
  one of the K shares);
* hold when the data cannot be trusted: the dropped share or a cohort's share proven
  past its limit (at alpha_kill / K);
* promote when minimum pairs and duration are met, the pooled primary gain is proven and
  every binding cell is proven inside its margin, each test at alpha_promote: an
  intersection-union test, so the false-promotion probability is at most alpha_promote;
* hold instead of promoting when the gain is proven only at loads well below the load
  the next stage brings (`load_gap`; policy `guardrails.load_bands`, on by default);
* hold at the maximum duration; otherwise continue.

Each cell's test lives in `gate.stats.cell_checks`, the load hold in `gate.stats.load_gap`,
and the statistics the rule reads in `gate.stats.gate_stats`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from gate.db.enums import RolloutMode
from gate.stats.betting import bet_rejects
from gate.stats.cell_checks import cell_n, check_cell, harm_interval
from gate.stats.gate_stats import GateStats
from gate.stats.ids import ALL, EVAL_PREFIX, MetricId
from gate.stats.load_gap import load_gap
from gate.stats.policy import Policy
from gate.stats.registry import (
    Family,
    Rule,
    Source,
    alpha_kill_each,
    collapse_segments,
    guardrails,
    metric_id,
    rule_for,
)
from gate.stats.sequences import BoolArray, IntArray, MeanStats, Num, TwoMeans

__all__ = ["EVAL_PREFIX", "Code", "LookFlags", "apply_rule"]

TTFT_P50 = MetricId("ttft_p50")
TTFT_TAIL = MetricId("ttft_tail")
E2E_TAIL = MetricId("e2e_tail")
FAILURES = MetricId("failures")
# Canary only: client disconnects per cohort (not attributable to a route, yet a harm).
CANCELS = MetricId("cancels")
FEEDBACK = MetricId("feedback")
GREEDY = MetricId("greedy_mismatch")
ACCEPTANCE = MetricId("acceptance")
# Trust checks (dropped share, imbalance) wait for this many pairs.
TRUST_MIN_PAIRS = 100


class Code(IntEnum):
    """Decisions as integers, for arrays."""

    CONTINUE = 0
    PROMOTE = 1
    KILL = 2
    HOLD = 3


@dataclass(frozen=True)
class LookFlags:
    """Per-look outcome of the rule: decision codes and the flags behind them."""

    code: IntArray
    alpha_kill_each: float
    harmful: dict[tuple[str, str], BoolArray]
    inside: dict[tuple[str, str], BoolArray]
    binding: dict[tuple[str, str], BoolArray]
    collapsed: dict[str, BoolArray]
    gain: BoolArray
    enough: BoolArray
    untrusted_drops: BoolArray
    imbalanced: BoolArray
    timed_out: BoolArray
    # Promotion held: the gain is proven only at loads well below the next stage's.
    untested_load: BoolArray = field(default_factory=lambda: np.asarray(False))
    alarms: dict[tuple[str, str], BoolArray] = field(default_factory=dict)


def _gain(policy: Policy, stats: GateStats) -> BoolArray:
    pooled = stats.cells.get((policy.primary.metric, ALL))
    if not isinstance(pooled, MeanStats | TwoMeans):
        return np.asarray(False)
    upper = harm_interval(
        pooled,
        Rule(0.0, 0.0, True),
        alpha_kill=policy.alpha_promote,
        alpha_promote=policy.alpha_promote,
        n_opt=policy.n_opt(ALL),
    ).upper
    return np.asarray(np.asarray(upper) < np.log1p(-policy.primary.min_gain))


def _canary(stats: GateStats) -> bool:
    return stats.cohort_counts is not None


def _missing_required(policy: Policy, stats: GateStats) -> bool:
    # Promotion needs every required, enabled guardrail of the mode measured at least pooled.
    mode = RolloutMode.CANARY if _canary(stats) else RolloutMode.SHADOW
    needed: list[str] = [policy.primary.metric]
    for g in guardrails():
        family = g.family(mode)
        if family is None or family is Family.COLLAPSE or g.source is Source.EVALUATOR:
            continue
        rule = rule_for(policy, g.id, ALL)
        if rule is not None and rule.required and g.source not in _OPTIONAL_SOURCES:
            needed.append(g.id)
    return any((metric, ALL) not in stats.cells for metric in needed)


# Sources whose cells exist only once such data arrived (their guardrails bind then).
_OPTIONAL_SOURCES = (Source.FEEDBACK, Source.GREEDY)


def apply_rule(policy: Policy, stats: GateStats) -> LookFlags:
    """Apply the gate's rule to every look in `stats` at once."""
    evaluators = {m for m, _ in stats.cells if metric_id(m).evaluator is not None}
    alpha_each = alpha_kill_each(policy, len(evaluators), canary=_canary(stats))
    harmful, inside, binding = {}, {}, {}
    for key, cell in stats.cells.items():
        rule = rule_for(policy, *key)
        if rule is None:
            continue
        harmful[key], inside[key] = check_cell(
            cell,
            rule,
            alpha_kill=alpha_each,
            alpha_promote=policy.alpha_promote,
            n_opt=policy.n_opt(key[1]),
        )
        has_data = cell_n(cell) > 0
        binding[key] = has_data | (rule.required and key[1] == ALL)
    threshold = np.log(policy.guardrails.acceptance.collapse_horizon / alpha_each)
    detectors = set(collapse_segments(policy)) if policy.guardrails.acceptance.enabled else set()
    collapsed = {
        seg: np.asarray(np.asarray(v) >= threshold)
        for seg, v in stats.collapse.items()
        if seg in detectors
    }
    flags = _combine(policy, stats, alpha_each, (harmful, inside, binding), collapsed)
    for key, cell in stats.control.items():
        rule = rule_for(policy, *key)
        if rule is not None:
            alarm, _ = check_cell(
                cell, rule, alpha_kill=alpha_each, alpha_promote=policy.alpha_promote,
                n_opt=policy.n_opt(key[1]),
            )  # fmt: skip
            flags.alarms[key] = np.asarray(np.asarray(stats.warmed_up) & alarm)
    return flags


def _combine(
    policy: Policy,
    stats: GateStats,
    alpha_each: float,
    flags: tuple[dict[tuple[str, str], BoolArray], ...],
    collapsed: dict[str, BoolArray],
) -> LookFlags:
    harmful, inside, binding = flags
    false = np.asarray(False)
    warm = np.asarray(stats.warmed_up)
    n_pairs, n_dropped = np.asarray(stats.n_pairs), np.asarray(stats.n_dropped)
    kill = warm & _any([*harmful.values(), *collapsed.values()], false)
    seen = n_pairs + n_dropped
    # Trust checks hold only on evidence (the share proven past its limit), so a few
    # early drops or an unlucky split do not stop a rollout.
    too_many = _share_beyond(seen, n_dropped, policy.max_dropped_share, alpha_each, above=True)
    drops = warm & (seen >= TRUST_MIN_PAIRS) & too_many
    imbalanced = false
    if stats.cohort_counts is not None:
        base, cand = (np.asarray(c, dtype=np.float64) for c in stats.cohort_counts)
        w, tol = stats.candidate_share, policy.max_cohort_imbalance
        off = _share_beyond(base + cand, cand, w * (1 + tol), alpha_each, above=True)
        off |= _share_beyond(base + cand, cand, w * (1 - tol), alpha_each, above=False)
        imbalanced = warm & (base + cand >= TRUST_MIN_PAIRS) & off
    elapsed = np.asarray(stats.elapsed_s)
    enough = (n_pairs >= policy.min_pairs) & (elapsed >= policy.min_duration_s)
    gain = _gain(policy, stats)
    proven = _all([inside[k] | ~binding[k] for k in inside], np.asarray(True))
    ready = warm & enough & gain & proven & (not _missing_required(policy, stats))
    untested = ready & load_gap(policy, stats).untested
    ready = ready & ~untested
    timed_out = elapsed >= policy.max_duration_s
    code = np.select(
        [kill, drops | imbalanced, ready, untested | timed_out],
        [Code.KILL, Code.HOLD, Code.PROMOTE, Code.HOLD],
        default=Code.CONTINUE,
    ).astype(np.int64)
    return LookFlags(
        code=code, alpha_kill_each=alpha_each, harmful=harmful, inside=inside,
        binding=binding, collapsed=collapsed, gain=gain, enough=enough,
        untrusted_drops=drops, imbalanced=imbalanced, timed_out=timed_out,
        untested_load=untested,
    )  # fmt: skip


def _share_beyond(n: Num, k: Num, m: float, alpha: float, *, above: bool) -> BoolArray:
    if not 0.0 < m < 1.0:
        return np.zeros(np.shape(n), dtype=bool)
    counts = [np.asarray(n, dtype=np.float64) - k, np.asarray(k, dtype=np.float64)]
    return bet_rejects([0.0, 1.0], counts, m, alpha, above=above)


def _any(flags: list[BoolArray], empty: BoolArray) -> BoolArray:
    out = empty
    for flag in flags:
        out = out | flag
    return out


def _all(flags: list[BoolArray], empty: BoolArray) -> BoolArray:
    out = empty
    for flag in flags:
        out = out & flag
    return out
