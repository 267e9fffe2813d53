"""Replay of recorded pairs: schema, first decisive verdict, and agreement with decide()."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import orjson
import pytest

from gate.db.enums import Decision, RolloutMode
from gate.errors import BadRequest
from gate.stats.cumulative import looks_every, to_stats
from gate.stats.policy import ALL, Policy
from gate.stats.record_columns import columns, fold_order
from gate.stats.replay import read_pairs, replay
from gate.stats.rule import ACCEPTANCE, FAILURES, GREEDY
from gate.stats.sequences import CohortCounts, MeanStats, PairedCounts, TwoCounts
from gate.stats.simulated_pairs import Scenario, draw_pairs, to_records
from tests import factories

POLICY = Policy()


def simulated(scenario: Scenario, seed: int = 0) -> list[dict]:
    cols = draw_pairs(scenario, POLICY, 1, np.random.default_rng(seed))
    return to_records(cols, POLICY)


def write(path: Path, records: list[dict]) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    return path


def test_replay_promotes_a_real_gain_and_reports_where(tmp_path):
    records = read_pairs(
        write(tmp_path / "p.jsonl", simulated(Scenario("gain", 4000, tpot_ratio=0.8)))
    )
    result = replay(records, POLICY, every=100)
    assert result.decision is Decision.PROMOTE and result.decisive
    assert result.pairs % 100 == 0 and POLICY.min_pairs < result.pairs <= 4000
    assert result.verdict.decision is Decision.PROMOTE
    assert result.looks == result.pairs // 100


def test_replay_kills_a_quality_drop_and_agrees_with_decide_at_that_look():
    records = simulated(Scenario("drop", 4000, eval_drops=(0.08, 0.0)), seed=3)
    result = replay(records, POLICY, every=50)
    assert result.decision is Decision.KILL
    assert any(code.startswith("kill:eval:eval0") for code in result.verdict.reason_codes)
    # Nothing decisive at the look before: the first decisive verdict is reported.
    earlier = replay(records[: result.pairs - 50], POLICY, every=50)
    assert earlier.decision is Decision.CONTINUE and not earlier.decisive


def test_aa_replay_stays_undecided_and_reports_the_last_look():
    result = replay(simulated(Scenario("aa", 1234)), POLICY, every=100)
    assert (result.decision, result.decisive, result.pairs) == (Decision.CONTINUE, False, 1234)
    assert result.looks == len(looks_every(1234, 100)) == 13


def test_lines_out_of_order_are_sorted_by_created_at():
    records = simulated(Scenario("drop", 3000, eval_drops=(0.08, 0.0)), seed=5)
    shuffled = copy.deepcopy(records)
    np.random.default_rng(1).shuffle(shuffled)
    assert replay(shuffled, POLICY, every=50).pairs == replay(records, POLICY, every=50).pairs


def test_evaluated_pairs_come_first_in_fold_order_then_the_rest_by_creation():
    def record(pair_id, created, evaluated):
        return {"pair_id": pair_id, "created_at": created, "evaluated_at": evaluated}

    records = [
        record("d", 1.0, None),
        record("c", 2.0, 50.0),
        record("b", 3.0, 40.0),
        record("a", 4.0, 40.0),  # same stamp as "b": the id decides, as in the database
        record("e", 0.0, None),
    ]
    assert [r["pair_id"] for r in fold_order(records)] == ["a", "b", "c", "e", "d"]
    ordered = fold_order(records)
    assert fold_order(ordered) is ordered  # already in order: kept as it is


def test_failed_side_fails_its_evaluators_and_counts_as_failure():
    record = {
        "pair_id": "x", "segment": "chat", "created_at": "2025-05-01T12:00:00Z",
        "baseline": {"ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 2.0, "evals": {"task": True}},
        "candidate": {"status": "timeout", "evals": {}},
    }  # fmt: skip
    cols = columns([record] * 300, POLICY, RolloutMode.SHADOW)
    assert cols.failed[0].tolist() == [False, True]
    assert np.isnan(cols.ttft[0, 1]) and cols.evals["task"][0, 0] == 0.0
    assert np.isnan(cols.evals["task"][0, 1])  # not scored, but the failure fails it
    stats = to_stats(cols, POLICY, np.array([300]))
    task = stats.cells[("eval:task", ALL)]
    assert isinstance(task, PairedCounts)
    assert (float(task.n[0]), float(task.worse[0])) == (100.0, 100.0)  # after 200 warm-up
    failures = stats.cells[(FAILURES, "chat")]
    assert isinstance(failures, PairedCounts) and float(failures.worse[0]) == 100.0


def test_control_pairs_feed_only_the_greedy_control_rate():
    def pair(control: bool, match: bool) -> dict:
        side = {"ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 2.0}
        return {
            "pair_id": "p", "created_at": 0, "is_control": control, "baseline": side,
            "candidate": {**side, "evals": {"greedy_parity": match}, "draft_tokens": 10,
                          "accepted_tokens": 7},
        }  # fmt: skip

    records = [pair(i % 4 == 0, i % 10 != 0) for i in range(1200)]
    stats = to_stats(columns(records, POLICY, RolloutMode.SHADOW), POLICY, np.array([1200]))
    greedy = stats.cells[(GREEDY, ALL)]
    assert isinstance(greedy, TwoCounts)
    assert float(greedy.baseline.n[0]) == 250 and float(greedy.candidate.n[0]) == 750
    assert float(np.asarray(stats.n_pairs)[0]) == 750
    acceptance = stats.cells[(ACCEPTANCE, ALL)]
    assert isinstance(acceptance, MeanStats) and float(acceptance.n[0]) == 750


def test_canary_records_have_one_side_and_use_unpaired_cells():
    records = simulated(Scenario("canary", 6000, eval_drops=(0.10, 0.0)), seed=7)
    for i, record in enumerate(records):
        record["candidate" if i % 2 else "baseline"] = None
    result = replay(records, POLICY, every=100, mode=RolloutMode.CANARY, candidate_share=0.5)
    assert result.decision is Decision.KILL
    assert "kill:eval:eval0:all" in result.verdict.reason_codes
    paired_mode = replay(records, POLICY, every=100)  # shadow: half-empty pairs are dropped
    assert paired_mode.decision is Decision.HOLD
    assert paired_mode.verdict.reason_codes == ("hold:dropped_share",)


def canary_record(i: int, *, candidate: dict | None, baseline: dict | None) -> dict:
    return {"pair_id": f"p{i}", "segment": "chat", "created_at": i,
            "baseline": baseline, "candidate": candidate}  # fmt: skip


OK_SIDE = {"ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 2.0, "evals": {"task": True}}


def test_a_canary_fallback_is_the_candidates_failure_and_its_rescue_no_baseline_sample():
    fell_back = {"status": "fallback", "evals": {"task": False}}
    records = [
        canary_record(i, candidate=fell_back, baseline=OK_SIDE)
        if i % 2
        else canary_record(i, candidate=None, baseline=OK_SIDE)
        for i in range(400)
    ]
    stats = to_stats(columns(records, POLICY, RolloutMode.CANARY), POLICY, np.array([400]),
                     mode=RolloutMode.CANARY)  # fmt: skip
    failures = stats.cells[(FAILURES, ALL)]
    assert isinstance(failures, CohortCounts)
    # 200 live pairs after warm-up: 100 candidate calls, all failed; 100 baseline calls.
    assert (float(failures.n[0]), float(failures.candidate[0]), float(failures.baseline[0])) == (
        200.0, 100.0, 0.0)  # fmt: skip
    assert stats.cohort_counts is not None
    assert [float(c[0]) for c in stats.cohort_counts] == [100.0, 100.0]


def test_a_cancelled_side_drops_its_pair_and_a_null_result_is_neither_pass_nor_fail():
    cancelled = {"status": "cancelled", "evals": {}}
    unjudged = {**OK_SIDE, "evals": {"task": None}}
    records = [
        canary_record(i, baseline=OK_SIDE, candidate=cancelled if i % 3 == 0 else unjudged)
        for i in range(600)
    ]
    cols = columns(records, POLICY, RolloutMode.SHADOW)
    assert cols.dropped.sum() == 200 and np.isnan(cols.evals["task"][:, 1]).all()
    stats = to_stats(cols, POLICY, np.array([600]))
    assert float(stats.n_dropped[0]) == len([i for i in range(200, 600) if i % 3 == 0])
    assert float(stats.cells[("eval:task", ALL)].n[0]) == 0.0


def test_malformed_input_is_a_bad_request_naming_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"pair_id": "a", "created_at": 0}\nnot json\n')
    with pytest.raises(BadRequest, match=r"bad.jsonl:2: not JSON"):
        read_pairs(path)
    with pytest.raises(BadRequest, match=r"pair 1: not a pair record"):
        replay([{"pair_id": "a"}], POLICY)
    with pytest.raises(BadRequest, match="pair 1: not a pair record"):
        replay([{"created_at": 0, "baseline": {"status": "exploded"}}], POLICY)
    with pytest.raises(BadRequest, match="no pairs"):
        replay([], POLICY)


def canary_cancel_records(candidate_cancels: float, seed: int) -> list[dict]:
    """Canary records (one side each) where clients cancel 2% of baseline-served calls."""
    return factories.canary_cancel_records(POLICY, cancel_rate=0.02, pairs=4000, seed=seed,
                                           candidate_cancel_rate=candidate_cancels)  # fmt: skip


def test_a_canary_whose_clients_give_up_on_the_candidate_is_killed_by_the_cancel_rate():
    records = canary_cancel_records(0.10, seed=11)
    assert any(r["candidate"] and r["candidate"]["status"] == "cancelled" for r in records)
    result = replay(records, POLICY, every=100, mode=RolloutMode.CANARY)
    assert result.decision is Decision.KILL
    assert "kill:cancels:all" in result.verdict.reason_codes
    # The cancelled pairs stay out of every other cell: only the cancel rate saw them.
    assert all(code.startswith("kill:cancels:") for code in result.verdict.reason_codes)


def test_an_aa_canary_with_cancels_is_not_killed_by_them():
    records = canary_cancel_records(0.02, seed=12)
    result = replay(records, POLICY, every=100, mode=RolloutMode.CANARY)
    assert result.decision is not Decision.KILL, result.verdict.reason_codes
    cancels = [c for c in result.verdict.cells if c.metric == "cancels" and c.segment == ALL]
    assert len(cancels) == 1 and cancels[0].n > 0


def test_shadow_verdicts_ignore_cancels_beyond_dropping_their_pairs():
    records = simulated(Scenario("gain", 3000, tpot_ratio=0.8), seed=13)
    for i, record in enumerate(records):
        if i % 40 == 0:
            record["baseline"]["status"] = "cancelled"
    as_dropped = copy.deepcopy(records)
    for record in as_dropped:
        if record["baseline"]["status"] == "cancelled":
            record["baseline"]["status"] = "dropped"
    cancelled, dropped = replay(records, POLICY), replay(as_dropped, POLICY)
    assert cancelled.verdict == dropped.verdict and cancelled.pairs == dropped.pairs
    assert not any(c.metric == "cancels" for c in cancelled.verdict.cells)


def test_each_stage_spends_an_equal_share_of_alpha_kill():
    # Seeded 5-point evaluator drop. Every stage of the default four judges at
    # alpha_kill / 4, as a one-stage policy with that alpha would; the whole alpha_kill
    # (what each stage spent before) gives a tighter kill-side bound on the same pairs.
    records = simulated(Scenario("drop", 2000, eval_drops=(0.05, 0.0)), seed=3)
    share = Policy(stages=[100.0], alpha_kill=POLICY.alpha_kill / 4)
    whole = Policy(stages=[100.0])
    once = len(records)  # one look at the end: the same pairs behind every verdict
    want = replay(records, share, every=once).verdict
    for stage in range(len(POLICY.stages)):
        assert replay(records, POLICY, every=once, stage=stage).verdict == want
    assert replay(records, POLICY, every=once).verdict == want  # stage 0 by default

    def lower(policy: Policy) -> float:
        verdict = replay(records, policy, every=once).verdict
        return next(c.lower for c in verdict.cells if (c.metric, c.segment) == ("eval:eval0", ALL))

    assert lower(share) < lower(whole)
    assert want.decision is Decision.KILL


@pytest.mark.parametrize(
    "fields",
    [
        {"n": 1, "cut": 0, "bins": [1.0] * 20},  # the shares sum to 20, not 1
        {"n": 2, "cut": 0, "bins": [2.0, -1.0, 1.0] + [0.0] * 17},  # a negative share
        {"n": -3, "cut": 0, "bins": [0.0] * 20},  # a negative count
        {"n": 1.5, "cut": 0, "bins": [1.5] + [0.0] * 19},  # not whole
    ],
)
def test_malformed_exactness_fields_are_a_bad_request(fields):
    records = simulated(Scenario("aa", 5), seed=3)
    records[2]["candidate"]["exactness"] = fields
    with pytest.raises(BadRequest, match="exactness is malformed"):
        replay(records, POLICY)
