"""Acceptance-collapse detector: golden recursion, false-alarm budget, detection delay."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gate.stats.change import (
    CollapseState,
    log_evalues,
    log_sr_path,
    log_threshold,
    update,
)


def test_log_sr_path_matches_the_recursion_by_hand():
    # e-values 2, 0.5, 3: R1 = 2 (0 + 1) = 2, R2 = 0.5 (2 + 1) = 1.5, R3 = 3 (1.5 + 1) = 7.5.
    path = log_sr_path(np.log(np.array([2.0, 0.5, 3.0])))
    assert np.exp(path) == pytest.approx([2.0, 1.5, 7.5])
    # Continuing from R = 7.5 with e = 2 gives 2 (7.5 + 1) = 17.
    assert math.exp(float(log_sr_path(np.log(np.array([2.0])), math.log(7.5))[0])) == (
        pytest.approx(17.0)
    )


def test_log_evalues_golden():
    # m0 = 0.35, bet 0.8: lam = 0.8 / 0.65; r = 0 -> ln(1 + 0.8 * 0.35 / 0.65) = 0.358...
    got = log_evalues(np.array([0.0, 0.35, 1.0]), 0.35)
    assert got == pytest.approx([math.log(1 + 0.8 * 0.35 / 0.65), 0.0, math.log(0.2)])


def test_update_keeps_the_running_maximum():
    state = update(CollapseState(), np.log(np.array([2.0, 0.5, 3.0])))
    state = update(state, np.log(np.array([0.01])))
    assert state.n == 4
    assert math.exp(state.max_log_sr) == pytest.approx(7.5)
    assert math.exp(state.log_sr) == pytest.approx(0.01 * 8.5)
    assert update(state, np.array([])) == state


def test_false_alarms_stay_within_budget_and_collapse_is_caught_fast():
    # 2,000 healthy segments of 5,000 requests with Beta(7, 3) acceptance (mean 0.7);
    # m0 = 0.5 * 0.7; budget alpha = 0.05 over T = 5,000 requests.
    rng = np.random.default_rng(3)
    healthy = rng.beta(7, 3, size=(2000, 5000))
    paths = log_sr_path(log_evalues(healthy, 0.35))
    threshold = log_threshold(5000, 0.05)
    assert (paths.max(axis=1) >= threshold).mean() <= 0.05
    # Collapse to Beta(1, 9) (mean 0.1) after 1,000 requests: alarm within 150 requests.
    collapsed = np.concatenate([healthy[:200, :1000], rng.beta(1, 9, size=(200, 150))], axis=1)
    hits = log_sr_path(log_evalues(collapsed, 0.35)).max(axis=1) >= threshold
    assert hits.mean() >= 0.99
