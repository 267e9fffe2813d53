"""The multi-arm rule: per-arm kills, the anytime-valid choice, ties, late arms."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from gate.stats.arms import (
    ArmState,
    ArmStream,
    ahead_of,
    arm_intervals,
    arm_policy,
    choose,
    shares,
    stage_weights,
)
from gate.stats.policy import Policy
from gate.stats.rule import Code
from gate.stats.sequences import MeanStats

POLICY = Policy()
LOOKS = 6
SD = 0.35  # a paired TPOT log-ratio's spread in the simulation


def stream(
    ratio: float, n: list[float], code: list[int] | None = None, sd: float = SD
) -> ArmStream:
    """An arm whose mean log-ratio is exactly log(ratio), with `n` pairs at each look."""
    count = np.asarray(n, dtype=np.float64)
    mu = np.log(ratio)
    return ArmStream(
        pairs=count,
        code=np.asarray(code or [Code.CONTINUE] * len(n), dtype=np.int64),
        primary=MeanStats(count, mu * count, count * (mu * mu + sd * sd)),
    )


GROWING = [0, 50, 500, 2000, 8000, 20000]
PROMOTE_LATE = [Code.CONTINUE] * 4 + [Code.PROMOTE] * 2


def test_each_arm_spends_its_slot_of_both_alphas():
    judged = arm_policy(POLICY)
    assert judged.alpha_kill == pytest.approx(POLICY.alpha_kill / POLICY.arms.slots)
    assert judged.alpha_promote == pytest.approx(POLICY.alpha_promote / POLICY.arms.slots)


def test_the_clearly_best_arm_is_promoted_once_its_own_gate_promotes():
    got = choose(POLICY, [stream(0.75, GROWING, PROMOTE_LATE), stream(0.9, GROWING, PROMOTE_LATE)])
    assert list(got.code) == [Code.CONTINUE] * 4 + [Code.PROMOTE] * 2
    assert list(got.winner[4:]) == [0, 0] and list(got.leader[2:]) == [0] * 4
    assert got.state[0, 3] == ArmState.BEST and got.state[0, 4] == ArmState.PROMOTED
    assert got.state[1, 4] == ArmState.RUNNING
    assert got.state[0, 0] == ArmState.WAITING


def test_a_slower_arm_whose_gate_promotes_is_not_chosen_over_a_faster_one():
    slow_promotes = [Code.PROMOTE] * LOOKS
    got = choose(POLICY, [stream(0.75, GROWING), stream(0.9, GROWING, slow_promotes)])
    assert (got.winner == -1).all() and (got.code == Code.CONTINUE).all()


def test_equal_arms_are_tied_not_ranked_and_the_tie_may_promote():
    got = choose(POLICY, [stream(0.8, GROWING, PROMOTE_LATE), stream(0.8, GROWING)])
    assert got.state[0, -1] == ArmState.PROMOTED and got.state[1, -1] == ArmState.TIED
    # Before the intervals fit inside the tie margin, neither is best.
    assert got.state[0, 2] == ArmState.RUNNING and got.code[2] == Code.CONTINUE


def test_a_killed_arm_stops_counting_and_a_fast_harmful_arm_blocks_until_killed():
    harmful = stream(0.6, GROWING, [Code.CONTINUE] * 4 + [Code.KILL, Code.CONTINUE])
    got = choose(POLICY, [stream(0.75, GROWING, [Code.PROMOTE] * LOOKS), harmful])
    assert list(got.code[3:]) == [Code.CONTINUE, Code.PROMOTE, Code.PROMOTE]
    assert list(got.state[1, 4:]) == [ArmState.KILLED, ArmState.KILLED]
    assert got.leader[3] == 1 and got.leader[4] == 0


def test_all_arms_killed_is_a_kill_and_all_live_holding_a_hold():
    kill = [Code.CONTINUE, Code.KILL] + [Code.CONTINUE] * 4
    hold = [Code.CONTINUE] * 5 + [Code.HOLD]
    got = choose(POLICY, [stream(1.0, GROWING, kill), stream(1.0, [0, 0, 0, 50, 80, 90], hold)])
    assert got.code[1] == Code.CONTINUE  # the second arm is still to come: no kill
    assert got.code[5] == Code.HOLD
    got = choose(POLICY, [stream(1.0, GROWING, kill), stream(1.0, GROWING, kill)])
    assert list(got.code[:2]) == [Code.CONTINUE, Code.KILL]


def test_an_arm_added_later_waits_then_must_be_beaten_before_a_choice():
    late = [0, 0, 0, 10, 5000, 20000]
    got = choose(POLICY, [stream(0.75, GROWING, [Code.PROMOTE] * LOOKS), stream(0.9, late)])
    assert list(got.state[1, :3]) == [ArmState.WAITING] * 3
    assert got.code[2] == Code.PROMOTE  # alone, the first arm is best by default
    assert got.code[3] == Code.CONTINUE  # ten pairs bound nothing: no choice over it yet
    assert got.code[4] == Code.PROMOTE


def test_intervals_cover_at_the_choice_alpha_split_over_slots():
    est, _lo, hi = arm_intervals(POLICY, [stream(0.8, [1000.0])])
    radius = float(hi[0, 0] - est[0, 0])
    assert est[0, 0] == pytest.approx(np.log(0.8))
    # Wider than a 95% pointwise interval: it is time-uniform and split four ways.
    assert radius > 1.96 * SD / np.sqrt(1000) * 1.5


def test_more_arms_than_slots_is_refused():
    with pytest.raises(ValueError, match=r"arms.slots"):
        choose(POLICY, [stream(1.0, GROWING)] * (POLICY.arms.slots + 1))


def test_runs_broadcast_like_looks():
    runs = np.asarray([GROWING, GROWING], dtype=np.float64)
    fast = ArmStream(runs, np.full(runs.shape, Code.PROMOTE), MeanStats(runs, np.log(0.75) * runs,
                     runs * (np.log(0.75) ** 2 + SD**2)))  # fmt: skip
    slow = ArmStream(runs, np.full(runs.shape, Code.CONTINUE), MeanStats(runs, np.log(0.9) * runs,
                     runs * (np.log(0.9) ** 2 + SD**2)))  # fmt: skip
    got = choose(POLICY, [fast, slow])
    assert got.code.shape == runs.shape and (got.winner[:, -1] == 0).all()


def test_the_arms_simulation_counts_the_choice_it_benchmarks():
    sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))
    import arms_sim

    row = arms_sim.run_case("three", POLICY, runs=6, pairs=3000, every=100, seed=1)
    assert row["runs"] == 6 and row["winner_share"]["0"][0] == row["promote"][0] > 0.5
    assert row["arm_chosen_ever"][2][0] == 0.0 and row["arm_killed_ever"][2][0] > 0.5


def test_moving_traffic_toward_the_leader_gives_it_the_extra_pairs():
    sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))
    import arms_sim

    grid = np.arange(1.0, 11.0)[None, :] * 50
    fast, slow = (stream(r, list(grid[0])) for r in (0.75, 0.9))
    as_runs = [
        ArmStream(grid, s.code[None, :], MeanStats(*(np.asarray(v)[None, :] for v in
                  (s.primary.n, s.primary.total, s.primary.total_sq))))
        for s in (fast, slow)
    ]  # fmt: skip
    moved = arms_sim.toward_leader(as_runs)
    assert list(moved[0].pairs[0]) == [100, 200, 300, 400, 500]
    assert list(moved[1].pairs[0]) == [50, 100, 150, 200, 250]


def test_a_reallocated_stage_gives_the_arm_behind_a_quarter_of_the_pairs():
    sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))
    import arms_sim

    grid = np.arange(1.0, 9.0)[None, :] * 50
    as_runs = [
        ArmStream(grid, s.code[None, :], MeanStats(*(np.asarray(v)[None, :] for v in
                  (s.primary.n, s.primary.total, s.primary.total_sq))))
        for s in (stream(r, list(grid[0])) for r in (0.75, 0.9))
    ]  # fmt: skip
    full, behind = arms_sim.at_weights(as_runs, (1.0, 0.25))
    assert list(full.pairs[0]) == list(grid[0])
    assert list(behind.pairs[0]) == [50] * 4 + [100] * 4


def test_only_an_arm_proven_behind_another_live_arm_gets_the_behind_weight():
    intervals = {
        "k2": (1.02, 1.10),  # beaten by k4 (1.01 < 1.02)
        "k4": (0.90, 1.01),  # the leader
        "k8": (0.95, 1.05),  # overlaps k4: not proven behind
        "new": (None, None),  # too few pairs: unbounded
    }
    weights = stage_weights(ahead_of(intervals), behind_weight=0.25)
    assert weights == {"k2": 0.25, "k4": 1.0, "k8": 1.0, "new": 1.0}
    assert stage_weights(ahead_of({"k2": (1.02, 1.10)}), behind_weight=0.25) == {"k2": 1.0}


def test_shares_are_the_weights_normalised():
    assert shares({"k2": 0.25, "k4": 1.0}) == {"k2": 0.2, "k4": 0.8}
    assert shares({}) == {}


def test_the_behind_weight_has_a_floor_and_reallocation_is_off_by_default():
    assert Policy().arms.reallocate is False
    with pytest.raises(ValueError, match=r"greater than or equal to 0\.05"):
        Policy.model_validate({"arms": {"behind_weight": 0.0}})
