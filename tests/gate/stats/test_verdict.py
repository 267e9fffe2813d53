"""decide(): kill, promote, hold and continue, with reasons, summaries and estimates."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest

from gate.db.enums import Decision
from gate.stats.betting import diff_interval
from gate.stats.gate_stats import GateStats
from gate.stats.policy import ALL, Policy, load_policy
from gate.stats.registry import alpha_kill_each
from gate.stats.sequences import CohortCounts, MeanStats, PairedCounts
from gate.stats.verdict import decide

POLICY = Policy()
SEGMENTS = [ALL, *POLICY.segments]


def mean(n: int, mu: float, sd: float) -> MeanStats:
    """Sufficient statistics of n values with mean mu and sample sd."""
    return MeanStats(n=n, total=n * mu, total_sq=(n - 1) * sd**2 + n * mu**2)


def healthy(n: int = 5000, tpot_ratio: float = 0.8) -> GateStats:
    """Every cell clearly inside its margin; `n` pairs pooled, a fifth per segment."""
    cells = {}
    for seg in SEGMENTS:
        k = n if seg == ALL else n // 5
        cells[("tpot", seg)] = mean(k, math.log(tpot_ratio), 0.3)
        cells[("ttft_p50", seg)] = mean(k, 0.0, 0.4)
        for metric in ("ttft_tail", "e2e_tail", "failures", "eval:task"):
            cells[(metric, seg)] = PairedCounts(n=k, worse=k // 200, better=k // 200)
        cells[("acceptance", seg)] = mean(k, 0.7, 0.15)
    return GateStats(cells=cells, n_pairs=n, elapsed_s=3600.0)


def test_healthy_gain_is_promoted_with_every_cell_inside():
    verdict = decide(POLICY, healthy())
    assert verdict.decision is Decision.PROMOTE
    assert verdict.reason_codes == ("promote:gain_proven", "promote:guardrails_inside")
    assert {c.status for c in verdict.cells} == {"inside"}
    tpot = next(c for c in verdict.cells if (c.metric, c.segment) == ("tpot", ALL))
    # Latency cells read as ratios: estimate 0.8, thresholds 1.1.
    assert tpot.estimate == pytest.approx(0.8)
    assert tpot.lower < 0.8 < tpot.upper < 0.95
    assert (tpot.kill_at, tpot.margin) == pytest.approx((1.1, 1.1))
    assert verdict.summary.startswith("PROMOTE on 5,000 tested pairs: gain proven")


def test_no_gain_never_promotes_however_much_data():
    verdict = decide(POLICY, healthy(n=100_000, tpot_ratio=1.0))
    assert verdict.decision is Decision.CONTINUE
    assert "continue:gain_unproven" in verdict.reason_codes


def test_evaluator_drop_kills_and_names_the_cell():
    stats = healthy()
    cells = dict(stats.cells)
    cells[("eval:task", ALL)] = PairedCounts(n=5000, worse=400, better=100)
    verdict = decide(POLICY, replace(stats, cells=cells))
    assert verdict.decision is Decision.KILL
    assert verdict.reason_codes == ("kill:eval:task:all",)
    cell = next(c for c in verdict.cells if c.status == "harmful")
    assert cell.estimate == pytest.approx(0.06)
    assert "eval:task +6.00 pts" in verdict.summary


def test_acceptance_below_floor_kills_and_reads_in_acceptance_units():
    stats = healthy()
    cells = dict(stats.cells)
    cells[("acceptance", "chat")] = mean(1000, 0.1, 0.1)
    verdict = decide(POLICY, replace(stats, cells=cells))
    assert verdict.reason_codes == ("kill:acceptance:chat",)
    cell = next(c for c in verdict.cells if c.status == "harmful")
    assert cell.estimate == pytest.approx(0.1)
    assert cell.lower < 0.1 < cell.upper < 0.2 == cell.kill_at


def test_acceptance_collapse_alarm_kills():
    threshold = math.log(POLICY.guardrails.acceptance.collapse_horizon / alpha_kill_each(POLICY))
    stats = replace(healthy(), collapse={"code": threshold + 0.1, "chat": threshold - 1})
    verdict = decide(POLICY, stats)
    assert verdict.decision is Decision.KILL
    assert verdict.reason_codes == ("kill:acceptance_collapse:code",)


def test_warmup_continues_without_testing():
    stats = healthy()
    cells = dict(stats.cells)
    cells[("eval:task", ALL)] = PairedCounts(n=5000, worse=400, better=100)
    verdict = decide(POLICY, replace(stats, cells=cells, warmed_up=False))
    assert (verdict.decision, verdict.reason_codes) == (Decision.CONTINUE, ("warmup",))


def test_minimum_pairs_and_duration_gate_promotion():
    verdict = decide(POLICY, replace(healthy(), n_pairs=999, elapsed_s=60.0))
    assert verdict.decision is Decision.CONTINUE
    assert verdict.reason_codes[:2] == ("continue:min_pairs", "continue:min_duration")


def test_absence_of_evidence_is_not_promotion():
    stats = healthy()
    # A segment with only 30 pairs of evaluator data: nothing is proven there yet.
    cells = dict(stats.cells)
    cells[("eval:task", "creative")] = PairedCounts(n=30, worse=0, better=0)
    verdict = decide(POLICY, replace(stats, cells=cells))
    assert verdict.decision is Decision.CONTINUE
    assert verdict.reason_codes == ("continue:unproven:eval:task:creative",)
    # A required guardrail with no data at all blocks promotion too.
    del cells[("failures", ALL)]
    assert decide(POLICY, replace(stats, cells=cells)).decision is Decision.CONTINUE


def test_segment_without_traffic_does_not_block():
    stats = healthy()
    cells = {k: v for k, v in stats.cells.items() if k[1] != "creative"}
    assert decide(POLICY, replace(stats, cells=cells)).decision is Decision.PROMOTE


def test_hold_on_max_duration_and_on_untrustworthy_data():
    timed_out = decide(POLICY, replace(healthy(tpot_ratio=1.0), elapsed_s=POLICY.max_duration_s))
    assert timed_out.decision is Decision.HOLD
    assert timed_out.reason_codes[0] == "hold:max_duration"
    dropped = decide(POLICY, replace(healthy(), n_dropped=500))
    assert (dropped.decision, dropped.reason_codes) == (Decision.HOLD, ("hold:dropped_share",))
    skewed = replace(healthy(), cohort_counts=(3000, 2000), candidate_share=0.5)
    assert decide(POLICY, skewed).reason_codes == ("hold:cohort_imbalance",)


def test_kill_wins_over_hold_and_promotion():
    stats = healthy()
    cells = dict(stats.cells)
    cells[("failures", "json")] = PairedCounts(n=1000, worse=60, better=0)
    verdict = decide(POLICY, replace(stats, cells=cells, n_dropped=500))
    assert verdict.decision is Decision.KILL


def test_estimates_are_json_ready():
    stats = healthy()
    cells = dict(stats.cells)
    cells[("ttft_p50", "chat")] = mean(5, 0.0, 0.4)  # too few: an unbounded interval
    cells[("failures", "chat")] = PairedCounts(0, 0, 0)  # no data: no estimate
    rows = decide(POLICY, replace(stats, cells=cells)).estimates()
    chat = next(r for r in rows if (r["metric"], r["segment"]) == ("ttft_p50", "chat"))
    assert (chat["lower"], chat["upper"]) == (0.0, None)  # a ratio is at least 0
    empty = next(r for r in rows if (r["metric"], r["segment"]) == ("failures", "chat"))
    assert empty["estimate"] is None and empty["n"] == 0
    assert all(set(r) >= {"metric", "segment", "estimate", "lower", "upper", "n"} for r in rows)


def test_decide_accepts_zero_dimensional_arrays_like_replay_does():
    stats = healthy()
    arrays = replace(stats, n_pairs=np.asarray(5000.0), elapsed_s=np.asarray(3600.0))
    assert decide(POLICY, arrays).decision is Decision.PROMOTE


def test_policy_margins_change_the_verdict():
    strict = load_policy("guardrails: {evaluators: {default: {margin: 0.001}}}")
    verdict = decide(strict, healthy())
    assert verdict.decision is Decision.CONTINUE
    assert "continue:unproven:eval:task:all" in verdict.reason_codes


def test_reported_interval_is_the_one_the_decision_used():
    stats = healthy()
    verdict = decide(POLICY, stats)
    cell = next(c for c in verdict.cells if (c.metric, c.segment) == ("failures", "json"))
    direct = diff_interval(
        stats.cells[("failures", "json")],
        alpha_lower=alpha_kill_each(POLICY, 1),
        alpha_upper=POLICY.alpha_promote,
    )
    assert (cell.lower, cell.upper) == pytest.approx((float(direct.lower), float(direct.upper)))
    # The decision said "inside": the promotion-level upper bound is below the margin.
    assert cell.status == "inside" and cell.upper < cell.margin


def test_a_rate_difference_interval_never_leaves_plus_minus_100_points():
    # Canary cohorts: every candidate call failed, none of the baseline's. The betting
    # pseudo-outcomes range over ±1/share, but a difference of two rates cannot.
    stats = healthy()
    cells = {
        key: CohortCounts(n=60, candidate=30, baseline=0, share=0.5)
        if key[0] == "failures"
        else cell
        for key, cell in stats.cells.items()
    }
    verdict = decide(POLICY, replace(stats, cells=cells))
    assert verdict.decision is Decision.KILL
    failures = [c for c in verdict.cells if c.metric == "failures"]
    assert failures and all(-1.0 <= c.lower <= c.upper <= 1.0 for c in failures)
    assert all(c.estimate is not None and -1.0 <= c.estimate <= 1.0 for c in failures)
    shown = [
        float(v)
        for v in re.findall(r"failures [^;]*?\[([+-][\d.]+), ([+-][\d.]+)\]", verdict.summary)[0]
    ]
    assert shown and max(abs(v) for v in shown) <= 100.0


def test_diff_interval_is_within_the_range_of_a_rate_difference():
    skewed = CohortCounts(n=np.array([10.0, 400.0]), candidate=np.array([9.0, 0.0]),
                          baseline=np.array([0.0, 390.0]), share=0.1)  # fmt: skip
    got = diff_interval(skewed, alpha_lower=0.001, alpha_upper=0.001)
    for bound in (got.estimate, got.lower, got.upper):
        assert np.all(np.abs(bound) <= 1.0)


def test_the_summary_counts_pairs_no_route_is_answerable_for():
    verdict = decide(POLICY, replace(healthy(), n_dropped=37.0))
    assert verdict.summary.endswith(
        "Data quality: 37 pair(s) not attributable (dropped or cancelled), left out."
    )
    assert "Data quality" not in decide(POLICY, healthy()).summary
