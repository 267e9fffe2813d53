"""Sampled-parity pairs: eligibility, per-answer statistics and the two-sided test."""

from __future__ import annotations

import numpy as np
import pytest

from gate.parity import (
    AnswerStats,
    Exclusion,
    Side,
    answer_stats,
    control_margin,
    differences,
    eligibility,
    explain,
    parity_test,
)
from gate.stats.sequences import MeanStats

SAMPLED = Side(temperature=0.8, top_p=0.95, max_tokens=128, finish_reason="stop")


def side(**changes: object) -> Side:
    return Side(**{**SAMPLED.__dict__, **changes})


@pytest.mark.parametrize(
    ("baseline", "candidate", "reason"),
    [
        (SAMPLED, SAMPLED, None),
        (side(temperature=0.0), side(temperature=0.0), Exclusion.GREEDY),
        (SAMPLED, side(top_p=1.0), Exclusion.SETTINGS),
        (SAMPLED, side(max_tokens=64), Exclusion.SETTINGS),
        # The mirror's 4 s deadline against the primary's 120 s: both sides ended
        # naturally, so neither was censored (every shadow pair would be excluded else).
        (side(deadline_s=120.0), side(deadline_s=4.0), None),
        # A side the deadline cut has no finish reason; one cut by max_tokens is censored.
        (side(deadline_s=120.0), side(deadline_s=4.0, finish_reason=None), Exclusion.FAILED),
        (side(deadline_s=120.0), side(deadline_s=4.0, finish_reason="length"), Exclusion.CENSORED),
        (side(seed=1000), side(seed=1000), Exclusion.SEEDED),
        (side(seed=1), side(seed=2), None),
        (SAMPLED, side(finish_reason="length"), Exclusion.CENSORED),
        (side(finish_reason="abort"), SAMPLED, Exclusion.CENSORED),
        (SAMPLED, side(finish_reason=None), Exclusion.FAILED),
        (side(logprobs=(-1.0,)), SAMPLED, Exclusion.LOGPROBS),
    ],
)
def test_eligibility(baseline, candidate, reason):
    verdict = eligibility(baseline, candidate)
    assert verdict.reason == reason
    assert verdict.eligible == (reason is None)


def test_a_seed_drawn_per_replay_is_no_exclusion():
    assert eligibility(side(seed=7), side(seed=7), seeds_vary=True).eligible


def test_logprobs_count_only_when_complete_on_both_sides():
    full = side(logprobs=(-0.5, -1.5), completion_tokens=2)
    # llama.cpp with speculation: one entry per verify step, fewer than the tokens.
    per_step = side(logprobs=(-0.5,), completion_tokens=2)
    assert eligibility(full, full).logprobs
    verdict = eligibility(full, per_step)
    assert verdict.eligible and not verdict.logprobs


def test_answer_statistics_and_differences():
    a = answer_stats(["a", "b", "a", "b", "a"], [-1.0, -2.0, -3.0, -2.0, -2.0])
    assert a == AnswerStats(length=5, distinct_2=0.5, mean_logprob=-2.0)
    b = answer_stats(["x", "y", "z"])
    assert b == AnswerStats(length=3, distinct_2=1.0, mean_logprob=None)
    assert differences(b, a) == {"length": 2.0, "distinct_2": -0.5}
    c = answer_stats(["x", "y"], [-1.0, -1.0])
    assert differences(a, c)["mean_logprob"] == pytest.approx(1.0)


def stats(d: np.ndarray) -> MeanStats:
    return MeanStats(d.size, float(d.sum()), float((d * d).sum()))


def test_the_test_proves_a_shift_beyond_the_margin_in_either_direction():
    rng = np.random.default_rng(4)
    control = rng.normal(0.0, 1.0, 500)
    margin = control_margin(stats(control))
    assert float(margin) == pytest.approx(0.1 * control.std(ddof=1))
    kwargs = {"alpha": 0.025 / 60, "n_opt": 1000.0}
    assert parity_test(stats(rng.normal(0.0, 1.0, 3000)), margin, **kwargs) == 0
    assert parity_test(stats(rng.normal(0.4, 1.0, 3000)), margin, **kwargs) == 1
    assert parity_test(stats(rng.normal(-0.4, 1.0, 3000)), margin, **kwargs) == -1
    # A shift inside the margin is tolerated however many pairs there are.
    assert parity_test(stats(rng.normal(0.05, 1.0, 100_000)), margin, **kwargs) == 0
    # Below the confidence sequence's minimum sample nothing is proven.
    assert parity_test(stats(np.full(10, 5.0) + rng.normal(0, 0.1, 10)), margin, **kwargs) == 0
    assert float(control_margin(MeanStats(1, 1.0, 1.0))) == np.inf


def test_explanations_name_the_direction():
    assert "mode-seeking" in explain("mean_logprob", 1)
    assert "more repetitive" in explain("distinct_2", -1)
    assert explain("length", 0) == "length: no shift proven"
