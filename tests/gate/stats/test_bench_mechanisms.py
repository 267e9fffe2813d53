"""Fast seeded checks of the mechanisms behind bench/gate_coverage.py and
bench/gate_alpha_spending.py (the simulations themselves run there, not here)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from gate.stats.policy import Policy

sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))

import gate_alpha_spending
import gate_coverage


def test_coverage_counts_a_run_once_whenever_a_bound_ever_excludes_the_truth():
    rng = np.random.default_rng(5)
    x = gate_coverage.ratio_stalls(rng, (40, 300))
    truth = gate_coverage._truth(gate_coverage.ratio_stalls, 5)
    lower, upper = gate_coverage.mean_family(x, truth, 0.05, 200.0)
    assert lower <= 40 and upper <= 40
    # A "truth" far above every run's mean: every run's upper bound excludes it, at once.
    assert gate_coverage.mean_family(x, truth + 1.0, 0.05, 200.0) == (0, 40)
    assert gate_coverage.mean_family(x, truth - 1.0, 0.05, 200.0) == (40, 0)


def test_exact_betting_sequences_reject_a_wrong_value_and_keep_the_true_one():
    rng = np.random.default_rng(6)
    # At the true difference the betting capital rarely wins (exact: at most alpha).
    held = gate_coverage.paired_counts_family(rng, 50, 1000, 0.05, 0.02, 0.05)
    assert max(held) <= 5
    canary = gate_coverage.cohort_counts_family(rng, 50, 1000, 0.5, (0.03, 0.05), 0.05)
    assert max(canary) <= 5
    # Acceptance in [0, 1]: the truth held, a value 0.1 off rejected on its side.
    x = gate_coverage.acceptance_beta19(rng, (50, 300))
    assert max(gate_coverage.bounded_family(x, 0.1, 0.05)) <= 5
    assert gate_coverage.bounded_family(x, 0.2, 0.05) == (0, 50)
    assert gate_coverage.bounded_family(x, 0.0 + 1e-3, 0.05) == (50, 0)
    # The detector raises no alarm on a stream that never collapses.
    assert gate_coverage.collapse_family(rng, 50, 1000, 0.05) == (0, 0)


def test_spending_alpha_over_stages_only_removes_kills_on_the_same_draws():
    # A 2-point drop, borderline in 1,500 pairs: some stages are killed at the whole alpha
    # per stage; on the same draws a quarter of it can only kill fewer, never others.
    policy = Policy(segments=["chat"], warmup_pairs=50)
    got = gate_alpha_spending.rollout_false_kills(
        policy, runs=30, seed=3, pairs=1500, every=50, drop=0.02
    )
    before, after = got["before"], got["after"]
    assert before["stage_alpha"] == pytest.approx(0.025)
    assert after["stage_alpha"] == pytest.approx(0.025 / 4)
    assert sum(before["kills_per_stage"]) > 0
    assert all(
        a <= b for a, b in zip(after["kills_per_stage"], before["kills_per_stage"], strict=True)
    )
    assert after["rollouts_killed"] < before["rollouts_killed"]
