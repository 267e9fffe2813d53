"""The demo's per-segment table: speedups only where there is a decode speed to compare."""

from __future__ import annotations

from gate.db.enums import Cohort, PairState
from gate.db.models import Evaluation
from gate.demo.summary import parity_counts, summarise
from tests import factories


def _pair(
    session, rollout_id: int, segment: str, base_tpot: float | None, spec_tpot: float | None
) -> None:
    pair = factories.pair(session, rollout_id)
    for cohort, tpot in ((Cohort.BASELINE, base_tpot), (Cohort.CANDIDATE, spec_tpot)):
        row = factories.generation(session, pair, cohort)
        row.segment, row.tpot_s, row.ttft_s = segment, tpot, 0.5
        if cohort is Cohort.CANDIDATE:
            row.spec_draft_tokens, row.spec_accepted_tokens = 10, 8
    session.flush()


def test_speedup_is_the_ratio_of_tpot_medians_except_for_answers_sent_in_one_burst(
    sqlite_session,
):
    rollout = factories.rollout(sqlite_session)
    for base, spec in ((0.030, 0.015), (0.032, 0.016), (0.028, 0.020)):
        _pair(sqlite_session, rollout.id, "proofread", base, spec)
    # Held-back tool calls: every chunk arrives at once, so the gateway records no TPOT.
    for _ in range(2):
        _pair(sqlite_session, rollout.id, "tool_call", None, None)

    rows = {row.segment: row for row in summarise(sqlite_session, rollout_id=rollout.id)}

    proofread = rows["proofread"]
    assert proofread.speedup is not None and abs(proofread.speedup - 0.030 / 0.016) < 1e-9
    assert not proofread.burst and proofread.acceptance == 0.8
    tool_call = rows["tool_call"]
    assert tool_call.burst and tool_call.speedup is None
    assert tool_call.tpot["baseline"][0] != tool_call.tpot["baseline"][0]  # NaN: shown "-"
    assert rows["all"].speedup is not None and list(rows)[-1] == "all"


def test_not_evaluable_results_are_counted_not_scored(sqlite_session):
    rollout = factories.rollout(sqlite_session)
    pair = factories.pair(sqlite_session, rollout.id)
    for cohort, passed in ((Cohort.BASELINE, True), (Cohort.CANDIDATE, None)):
        row = factories.generation(sqlite_session, pair, cohort)
        row.segment = "json"
        sqlite_session.flush()
        sqlite_session.add(
            Evaluation(
                generation_id=row.id,
                generation_started_at=row.started_at,
                evaluator="schema",
                version="1",
                passed=passed,
                not_evaluable=None if passed else "truncated",
            )
        )
    sqlite_session.flush()
    rows = {row.segment: row for row in summarise(sqlite_session, rollout_id=rollout.id)}
    assert rows["json"].pass_rates == {"schema": {"baseline": 1.0}}
    assert rows["json"].not_evaluable == rows["all"].not_evaluable == 1


def _sampled_pair(
    session, rollout_id: int, sides: dict, *, control: bool = False, dropped: bool = False
) -> None:
    """A closed sampled pair; `sides`: cohort -> (finish reason, mean log-prob, tokens)."""
    pair = factories.pair(session, rollout_id, is_control=control)
    pair.state = PairState.DROPPED if dropped else PairState.COMPLETE
    for cohort, (finish, mean, tokens) in sides.items():
        row = factories.generation(session, pair, cohort, output="a b c d")
        row.temperature, row.top_p, row.max_tokens, row.finish_reason = 0.8, 1.0, 64, finish
        row.output_tokens, row.logprob_tokens, row.logprob_sum = tokens, tokens, mean * tokens
    session.flush()


def test_parity_counts_say_which_pairs_are_eligible_and_the_shift_of_each_statistic(
    sqlite_session,
):
    rollout = factories.rollout(sqlite_session)
    base, cand = Cohort.BASELINE, Cohort.CANDIDATE
    for shift in (0.5, 0.3, 0.1):
        _sampled_pair(sqlite_session, rollout.id,
                      {base: ("stop", -1.0, 10), cand: ("stop", -1.0 + shift, 12)})  # fmt: skip
    # The candidate ran into max_tokens: censored, out of the test whatever it says.
    _sampled_pair(sqlite_session, rollout.id,
                  {base: ("stop", -1.0, 10), cand: ("length", 5.0, 64)})  # fmt: skip
    # Baseline against baseline: the control slice, not a candidate pair.
    control = {base: ("stop", -1.0, 10), Cohort.CONTROL: ("stop", 3.0, 10)}
    _sampled_pair(sqlite_session, rollout.id, control, control=True)
    # Dropped at its deadline, its late side landed since: the gate never judges it.
    late = {base: ("stop", -1.0, 10), cand: ("stop", 9.0, 12)}
    _sampled_pair(sqlite_session, rollout.id, late, dropped=True)

    counts = parity_counts(sqlite_session, rollout_id=rollout.id)

    assert (counts.sampled, counts.eligible, counts.with_logprobs) == (4, 3, 3)
    assert counts.excluded == {"censored": 1}
    logprob = counts.shifts["mean_logprob"]
    assert logprob.n == 3 and abs(logprob.mean - 0.3) < 1e-9 and abs(logprob.sd - 0.2) < 1e-9
    assert abs(logprob.t - 0.3 / (0.2 / 3**0.5)) < 1e-9
    assert counts.shifts["length"].mean == 2.0
