"""Load bands (issue 26): the primary gain per band of the candidate's load, promotion only,
and the hold when the gain is proven only at loads well below what promotion brings."""

from __future__ import annotations

import numpy as np
import pytest

from gate.db.enums import Decision, RolloutMode
from gate.reports.headline import reason_sentences
from gate.stats import registry
from gate.stats.cumulative import at_look, to_stats
from gate.stats.policy import Policy, load_policy
from gate.stats.record_columns import columns
from gate.stats.registry import LOAD_BANDS, guardrails, kill_slots
from gate.stats.replay import replay
from gate.stats.simulate import run_stages
from gate.stats.simulated_pairs import Scenario, draw_pairs, to_records
from gate.stats.verdict import decide

# Tails off: the test is about the primary gain and its load.
POLICY = load_policy(
    {
        "segments": ["chat"], "warmup_pairs": 100, "min_pairs": 300, "min_duration_s": 0,
        "stages": [25.0],
        "guardrails": {"ttft_tail": {"enabled": False}, "e2e_tail": {"enabled": False}},
    }
)  # fmt: skip
# 64 running requests on the baseline; the candidate carries a quarter of the traffic (a
# one-stage shadow rollout mirroring a quarter: its promotion hands the candidate it all).
QUARTER = Scenario(
    "flat 20%", pairs=1500, baseline_load=64.0, share=0.25, gain_at=(0.2, 0.2), eval_drops=(),
    error_rate=0.0,
)  # fmt: skip


def without_hold(policy: Policy) -> Policy:
    bands = policy.guardrails.load_bands.model_copy(update={"hold_untested_load": False})
    return policy.model_copy(
        update={"guardrails": policy.guardrails.model_copy(update={"load_bands": bands})}
    )


def records(s: Scenario = QUARTER, seed: int = 4) -> list[dict]:
    return to_records(draw_pairs(s, POLICY, 1, np.random.default_rng(seed)), POLICY)


def test_the_bands_are_declared_once_and_take_no_kill_share():
    off = load_policy({"guardrails": {"load_bands": {"enabled": False}}})
    assert LOAD_BANDS in guardrails() and LOAD_BANDS not in registry.tested(RolloutMode.SHADOW)
    assert kill_slots(Policy()) == kill_slots(off)
    with pytest.raises(Exception, match="rise strictly"):
        load_policy({"guardrails": {"load_bands": {"edges": [4, 2]}}})


def test_a_gain_proven_at_a_quarter_of_the_load_holds_before_full_traffic():
    pairs = records()
    held = replay(pairs, POLICY, every=len(pairs), stage=0).verdict
    assert held.decision is Decision.HOLD
    assert held.reason_codes == ("hold:load_untested",)
    assert "promoting it brings about" in held.summary
    # The verdict lists each band: the gain with its interval and both routes' loads.
    assert held.bands and sum(b.n for b in held.bands) > 1000
    n = sum(b.n for b in held.bands)
    assert sum(b.n * b.candidate_load for b in held.bands) / n == pytest.approx(16, abs=1)
    assert sum(b.n * b.baseline_load for b in held.bands) / n == pytest.approx(64, abs=2)
    loads = [b.candidate_load for b in held.bands]
    assert loads == sorted(loads)
    for band in held.bands:
        assert band.lower <= band.ratio <= band.upper
    assert any(b.proven and b.ratio == pytest.approx(0.8, abs=0.05) for b in held.bands)
    # Without the hold, or at the last stage (the candidate already carries it all), it
    # promotes; a pair stream without loads has no bands and no hold.
    assert replay(pairs, without_hold(POLICY), every=len(pairs)).verdict.decision is (
        Decision.PROMOTE
    )
    full = records(Scenario(**{**QUARTER.__dict__, "share": 1.0}))
    assert replay(full, POLICY, every=len(full)).decision is Decision.PROMOTE
    # In shadow mode a stage before the last only mirrors more: no hold there, the bigger
    # mirror is how the gain at more load gets measured.
    staged = POLICY.model_copy(update={"stages": [25.0, 100.0]})
    assert replay(pairs, staged, every=len(pairs)).decision is Decision.PROMOTE
    unloaded = [
        {**r, **{k: {**r[k], "load": None} for k in ("baseline", "candidate")}} for r in pairs
    ]
    verdict = replay(unloaded, POLICY, every=len(pairs)).verdict
    assert verdict.decision is Decision.PROMOTE and verdict.bands == ()
    assert any("well below" in s for s in reason_sentences(held.reason_codes, POLICY))


def test_replay_and_simulation_judge_the_bands_alike():
    cols = draw_pairs(QUARTER, POLICY, 1, np.random.default_rng(4))
    looks = np.array([QUARTER.pairs])
    # The look axis, then the runs axis (one run), indexed away.
    simulated = decide(POLICY, at_look(at_look(to_stats(cols, POLICY, looks), 0), 0))
    # Run 0 of the simulation, read back from its records, judged by replay.
    pairs = to_records(cols, POLICY)
    again = columns(pairs, POLICY, RolloutMode.SHADOW)
    assert np.allclose(np.nan_to_num(again.load), np.nan_to_num(cols.load[0]))
    replayed = replay(pairs, POLICY, every=len(pairs)).verdict
    assert (replayed.decision, replayed.reason_codes) == (
        simulated.decision,
        simulated.reason_codes,
    )
    assert replayed.bands == simulated.bands


def test_staged_shadow_rollouts_promote_a_flat_gain_and_never_a_gain_that_falls_with_load():
    # 25 % gain at 1 % load, -10 % at full load: the evidence at 1, 5 and 25 % of the load
    # looks good, the 100 % mirror shows the loss; a 20 % gain at every load goes through.
    policy = Policy(min_duration_s=0, segments=["chat"])
    kw = {"pairs": 2000, "every": 50, "baseline_load": 64.0, "eval_drops": (), "error_rate": 0.0}
    falling = run_stages(Scenario("falling", gain_at=(0.25, -0.10), **kw), policy, runs=24, seed=3)
    assert falling.share("promoted")[0] == 0.0
    assert falling.reached_within(2, 3000)[0] >= 0.8  # the early stages pass
    flat = run_stages(Scenario("flat", gain_at=(0.2, 0.2), **kw), policy, runs=24, seed=3)
    assert flat.share("promoted")[0] >= 0.8
