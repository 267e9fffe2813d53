"""The gate of a promoted rollout routed by load judges only load-matched pairs.

The simulation is bench/by_load_sim.py's (its routing of the pairs by load), seeded and
with fewer runs: two identical routes whose latency grows 5 % per running request, at a
load near the crossover, where the mirrored pairs' two calls meet different loads.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from gate.stats.columns import load_matched
from gate.stats.policy import Policy, at_stage, load_tolerance
from gate.stats.policy_sections import Promotion
from gate.stats.simulated_pairs import Scenario, draw_pairs

sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))

import by_load_sim

BY_LOAD = Policy(min_duration_s=0, promotion=Promotion(route_by_load=True))
LAST = at_stage(BY_LOAD, len(BY_LOAD.stages) - 1)
NEAR_CROSSOVER = by_load_sim.Routed(load=6.0, crossover=6, sample_rate=0.1, slope=0.05)
RUNS = 12


def test_an_aa_rollout_promoted_by_load_is_not_killed_for_the_load_gap():
    aa = Scenario("A/A", pairs=3000, every=20)
    tolerance = load_tolerance(BY_LOAD, promoted=True)
    assert tolerance == 1.0
    # Every mirrored pair judged: identical routes look ~16 % apart, and are killed.
    biased, _ = by_load_sim.killed(aa, NEAR_CROSSOVER, LAST, RUNS, 41, None)
    assert biased >= RUNS - 1
    kills, _ = by_load_sim.killed(aa, NEAR_CROSSOVER, LAST, RUNS, 41, tolerance)
    assert kills == 0


def test_a_slower_route_promoted_by_load_is_still_killed_on_load_matched_pairs():
    slower = Scenario("25% slower TPOT", pairs=3000, every=20, tpot_ratio=1.25)
    kills, _ = by_load_sim.killed(slower, NEAR_CROSSOVER, LAST, RUNS, 41, 1.0)
    assert kills == RUNS


def test_only_a_promoted_rollout_routed_by_load_is_judged_on_load_matched_pairs():
    assert load_tolerance(BY_LOAD, promoted=False) is None
    assert load_tolerance(Policy(), promoted=True) is None
    wide = BY_LOAD.model_copy(update={"promotion": Promotion(route_by_load=True, load_match=3)})
    assert load_tolerance(wide, promoted=True) == 3.0


def test_a_pair_without_loads_is_not_load_matched():
    aa = Scenario("A/A", pairs=6, every=6)
    cols = draw_pairs(aa, BY_LOAD, 1, np.random.default_rng(1))
    load = np.array([[[1.0, 2.0], [0.0, 2.0], [np.nan, 1.0], [3.0, 3.0], [5.0, 4.0], [2, 3.5]]])
    with_loads = replace(cols, load=load)
    assert load_matched(with_loads, 1.0).tolist() == [[True, False, False, True, True, False]]
    assert load_matched(with_loads, None).all()
    assert not load_matched(cols, 1.0).any()  # no loads recorded at all
