"""Speculation advisor: golden numbers under the stated cost model."""

from __future__ import annotations

import pytest

from gate.stats.advisor import PositionAcceptance, advise, propose, rate_pick, survival

# 1,000 verify steps; position 1 accepted 800 times, position 2 600, position 3 450.
COUNTERS = PositionAcceptance(drafts=1000, accepted=(800, 600, 450))


def test_expected_accepted_tokens_and_speedup_golden():
    advice = advise(COUNTERS, cost_ratio=0.1, max_k=3)
    # By hand: E[A_1] = 0.8, E[A_2] = 1.4, E[A_3] = 1.85; speedup (1 + E) / (1 + 0.1 k).
    assert [o.expected_accepted for o in advice.options] == pytest.approx([0.8, 1.4, 1.85])
    assert [o.speedup for o in advice.options] == pytest.approx([1.8 / 1.1, 2.4 / 1.2, 2.85 / 1.3])
    assert advice.recommended_k == 3
    assert not any(o.extrapolated for o in advice.options)


def test_extrapolation_is_geometric_and_flagged():
    advice = advise(COUNTERS, cost_ratio=0.1, max_k=6)
    # Last conditional acceptance 450 / 600 = 0.75: positions 4-6 survive with 0.3375,
    # 0.253125, 0.18984; speedups 3.1875 / 1.4 = 2.277, 3.4406 / 1.5 = 2.294, 2.269.
    assert [o.speedup for o in advice.options[3:]] == pytest.approx(
        [3.1875 / 1.4, 3.440625 / 1.5, 3.63046875 / 1.6]
    )
    assert advice.recommended_k == 5
    assert advice.options[4].extrapolated
    assert "extrapolated beyond the measured k=3" in advice.summary


def test_expensive_draft_means_no_speculation():
    advice = advise(COUNTERS, cost_ratio=1.0)
    assert advice.recommended_k == 0 and advice.speedup == 1.0
    assert advice.summary.startswith("do not speculate")


def test_verify_cost_shortens_the_recommendation():
    cheap = advise(COUNTERS, cost_ratio=0.05, max_k=3)
    costly = advise(COUNTERS, cost_ratio=0.05, verify_cost=0.3, max_k=3)
    assert costly.recommended_k < cheap.recommended_k


def test_degenerate_counters():
    curve, measured = survival(PositionAcceptance(drafts=0, accepted=()), 4)
    assert measured == 0 and curve.tolist() == [0.0] * 4
    assert advise(PositionAcceptance(0, ()), cost_ratio=0.1).recommended_k == 0
    # A later position counted more often than an earlier one is capped at the earlier.
    curve, _ = survival(PositionAcceptance(drafts=100, accepted=(50, 60)), 2)
    assert curve.tolist() == [0.5, 0.5]


def test_steps_that_draft_nothing_are_priced_as_plain_steps():
    # 2,000 verify steps, 1,000 of them drafted: half the steps emit one token at cost one.
    half = PositionAcceptance(drafts=1000, accepted=(800, 600, 450), steps=2000)
    advice = advise(half, cost_ratio=0.1, max_k=3)
    assert advice.draft_share == 0.5
    # By hand: tokens per step 1 + 0.5 E[A_k]; cost 1 + 0.5 * 0.1 k.
    assert [o.tokens_per_step for o in advice.options] == pytest.approx([1.4, 1.7, 1.925])
    assert [o.speedup for o in advice.options] == pytest.approx(
        [1.4 / 1.05, 1.7 / 1.1, 1.925 / 1.15]
    )
    assert "50% of verify steps drafted nothing" in advice.summary
    assert advise(COUNTERS, cost_ratio=0.1, max_k=3).options[2].speedup > advice.options[2].speedup


def test_arms_are_ranked_by_acceptance_length_never_by_rate():
    advice = advise(COUNTERS, cost_ratio=0.0, verify_cost=0.12, max_k=6)
    # The rate falls with k (0.8, 0.7, 0.62, ...): ranked by it, k = 1 would come first.
    assert rate_pick(advice) == 1
    found = propose(advice, current_k=3, count=3)
    assert 3 not in [o.k for o in found]  # the measured k is running already
    assert [o.speedup for o in found] == sorted((o.speedup for o in found), reverse=True)
    best_other = max((o for o in advice.options if o.k != 3), key=lambda o: o.speedup)
    assert found[0] == best_other and found[0].k > 1
    # Nothing that loses to plain decoding is proposed.
    assert propose(advise(COUNTERS, cost_ratio=1.0), current_k=3) == ()
