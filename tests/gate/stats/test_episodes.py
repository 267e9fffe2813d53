"""Episodes (conversations, agent runs) as the unit of the means' confidence sequences."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gate.db.enums import RolloutMode
from gate.stats.cell_checks import harm_interval
from gate.stats.columns import Acc, mean
from gate.stats.cumulative import looks_every, to_stats
from gate.stats.ids import ALL, Cell, MetricId
from gate.stats.policy import Policy
from gate.stats.registry import rule_for
from gate.stats.replay import read_pairs, replay
from gate.stats.sequences import (
    EpisodeCounts,
    EpisodeMean,
    MeanStats,
    PairedCounts,
    mean_interval,
)
from gate.stats.simulated_pairs import Scenario, draw_pairs, to_records

POLICY = Policy()
DEMO = Path(__file__).parents[3] / "gate" / "demo" / "data" / "recorded_pairs.jsonl"


def brute_sums(ep, x, valid, end):
    sums: dict[int, list[float]] = {}
    for e, v, ok in zip(ep[:end], x[:end], valid[:end], strict=True):
        if ok:
            sums.setdefault(int(e), []).append(float(v))
    s = {k: sum(v) for k, v in sums.items()}
    n = {k: len(v) for k, v in sums.items()}
    return (
        len(s),
        sum(v * v for v in s.values()),
        sum(s[k] * n[k] for k in s),
        sum(c * c for c in n.values()),
    )


def test_episode_sums_accumulated_pair_by_pair_equal_the_sums_over_whole_episodes():
    rng = np.random.default_rng(5)
    n = 600
    ep, seg = rng.integers(0, 50, n), rng.integers(0, 3, n)
    x, valid = rng.normal(size=n), rng.random(n) < 0.8
    looks = np.array([50, 333, 600])
    acc = Acc(seg, 3, looks, ep)
    for s in (None, 2):
        got = mean(acc, valid, x, s)
        assert isinstance(got, EpisodeMean)
        cell = valid if s is None else valid & (seg == s)
        for j, end in enumerate(looks):
            want = brute_sums(ep, x, cell, end)
            have = [got.episodes[j], got.episode_sq[j], got.episode_cross[j], got.episode_n_sq[j]]
            assert np.allclose(have, want)


def test_single_pair_episodes_give_the_independent_pairs_interval():
    rng = np.random.default_rng(6)
    x = rng.normal(0.1, 1.0, 400)
    valid = np.ones(400, dtype=bool)
    looks = looks_every(400, 40)
    seg = np.zeros(400, dtype=np.int64)
    alone = mean(Acc(seg, 1, looks, np.arange(400)), valid, x, None)
    plain = mean(Acc(seg, 1, looks), valid, x, None)
    assert type(plain) is MeanStats
    a = mean_interval(alone, alpha_lower=0.01, alpha_upper=0.025, n_opt=1000)
    b = mean_interval(plain, alpha_lower=0.01, alpha_upper=0.025, n_opt=1000)
    for u, v in zip((a.lower, a.upper), (b.lower, b.upper), strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-9)


def test_correlated_episodes_widen_the_interval_by_about_the_design_effect():
    # 100 episodes of 10 equal values: the design effect is 10, the SE 3.2 times wider.
    rng = np.random.default_rng(7)
    x = np.repeat(rng.normal(size=100), 10)
    ep = np.repeat(np.arange(100), 10)
    seg, valid, looks = np.zeros(1000, dtype=np.int64), np.ones(1000, dtype=bool), np.array([1000])
    kw = {"alpha_lower": 0.01, "alpha_upper": 0.025, "n_opt": 1000.0}
    wide = mean_interval(mean(Acc(seg, 1, looks, ep), valid, x, None), **kw)
    narrow = mean_interval(mean(Acc(seg, 1, looks), valid, x, None), **kw)
    ratio = (wide.upper - wide.estimate) / (narrow.upper - narrow.estimate)
    assert ratio[0] == pytest.approx(np.sqrt(10 * 999 / 1000 * 100 / 99), rel=1e-6)


def test_fewer_than_min_n_episodes_leave_the_mean_unbounded():
    x = np.linspace(-1, 1, 190)
    ep = np.arange(190) // 10  # 19 episodes
    seg, valid = np.zeros(190, dtype=np.int64), np.ones(190, dtype=bool)
    got = mean_interval(
        mean(Acc(seg, 1, np.array([190]), ep), valid, x, None),
        alpha_lower=0.01, alpha_upper=0.01, n_opt=100.0,
    )  # fmt: skip
    assert np.isneginf(got.lower[0]) and np.isposinf(got.upper[0])


def test_replay_of_the_demo_pairs_is_unchanged_without_episodes_and_with_each_pair_its_own():
    records = read_pairs(DEMO)
    assert not any(r.get("episode") for r in records)
    before = replay(records, POLICY, every=50)
    nulls = replay([{**r, "episode": None} for r in records], POLICY, every=50)
    own = replay([{**r, "episode": f"e{i}"} for i, r in enumerate(records)], POLICY, every=50)
    for other in (nulls, own):
        assert other.decision is before.decision and other.pairs == before.pairs
        assert other.verdict.reason_codes == before.verdict.reason_codes
    assert nulls.verdict == before.verdict


def test_an_episode_that_is_not_a_string_is_a_bad_request():
    from gate.errors import BadRequest

    records = read_pairs(DEMO)[:50]
    records[3] = {**records[3], "episode": 17}
    with pytest.raises(BadRequest, match="episode is not a string"):
        replay(records, POLICY)


def test_replayed_episodes_take_the_episode_as_the_unit():
    s = Scenario("icc", pairs=1500, every=100, episode_len=(5, 20), episode_icc=0.5)
    cols = draw_pairs(s, POLICY, 1, np.random.default_rng(3))
    records = to_records(cols, POLICY)
    assert len({r["episode"] for r in records}) < len(records) / 4
    looks = looks_every(s.pairs, s.every)
    rule = rule_for(POLICY, "tpot", ALL)
    assert rule is not None
    kw = {"alpha_kill": 0.001, "alpha_promote": 0.025, "n_opt": 1000.0}
    cell = Cell("tpot", ALL)
    wide = harm_interval(to_stats(cols, POLICY, looks).cells[cell], rule, **kw)
    alone = to_stats(replace(cols, episode=None), POLICY, looks).cells[cell]
    narrow = harm_interval(alone, rule, **kw)
    assert (wide.upper - wide.estimate)[0, -1] > 1.8 * (narrow.upper - narrow.estimate)[0, -1]
    # Replay reads the `episode` field: its verdict's interval is the episode one.
    got = replay(records, POLICY, every=100)
    assert not got.decisive
    (tpot,) = [c for c in got.verdict.cells if (c.metric, c.segment) == ("tpot", ALL)]
    with_ids = replay([{**r, "episode": None} for r in records], POLICY, every=100)
    (plain,) = [c for c in with_ids.verdict.cells if (c.metric, c.segment) == ("tpot", ALL)]
    assert tpot.upper / tpot.estimate > (plain.upper / plain.estimate) ** 1.8


def test_the_verdict_states_the_episodes_and_the_pairs_needed_carry_the_design_effect():
    from gate.reports.headline.facts import Facts
    from gate.reports.headline.needs import pairs_needed

    s = Scenario("icc", pairs=1000, every=100, episode_len=(5, 20), episode_icc=0.5)
    records = to_records(draw_pairs(s, POLICY, 1, np.random.default_rng(4)), POLICY)
    named = replay(records, POLICY, every=len(records)).verdict
    alone = replay([{**r, "episode": None} for r in records], POLICY, every=len(records)).verdict
    live = records[POLICY.warmup_pairs :]
    assert named.n_episodes == len({r["episode"] for r in live})
    assert f"tested pairs in {named.n_episodes:,} episodes" in named.summary
    assert alone.n_episodes is None and "episodes" not in alone.summary
    more_named = pairs_needed(Facts.of(named), POLICY, None).pairs
    more_alone = pairs_needed(Facts.of(alone), POLICY, None).pairs
    assert more_named is not None and more_alone is not None
    assert more_named > 1.5 * more_alone


def test_paired_rates_take_the_episode_as_the_unit_when_episodes_hold_several_pairs():
    s = Scenario("evals", pairs=2000, every=500, episode_len=(5, 20), eval_icc=0.5)
    cols = draw_pairs(s, POLICY, 1, np.random.default_rng(8))
    looks = looks_every(s.pairs, s.every)
    cell = Cell(MetricId("eval", "eval0"), ALL)
    named = to_stats(cols, POLICY, looks).cells[cell]
    alone = to_stats(replace(cols, episode=None), POLICY, looks).cells[cell]
    assert isinstance(named, EpisodeCounts) and type(alone) is PairedCounts
    rule = rule_for(POLICY, str(cell.metric), ALL)
    assert rule is not None
    kw = {"alpha_kill": 0.001, "alpha_promote": 0.025, "n_opt": 1000.0}
    wide, narrow = harm_interval(named, rule, **kw), harm_interval(alone, rule, **kw)
    assert (wide.upper - wide.lower)[0, -1] > 1.5 * (narrow.upper - narrow.lower)[0, -1]
    # Every episode one pair: the exact betting sequence of independent pairs, unchanged.
    own = to_stats(replace(cols, episode=np.arange(s.pairs)[None, :]), POLICY, looks)
    same = harm_interval(own.cells[cell], rule, **kw)
    for a, b in zip((same.lower, same.upper), (narrow.lower, narrow.upper), strict=True):
        np.testing.assert_array_equal(a, b)
    from gate.stats.cell_checks import check_cell

    for a, b in zip(
        check_cell(own.cells[cell], rule, **kw), check_cell(alone, rule, **kw), strict=True
    ):
        np.testing.assert_array_equal(a, b)


def test_episodes_never_make_a_rate_more_certain_than_independent_pairs():
    # 40 two-pair episodes, no pair where only one side failed: the clustered variance is
    # 0, so its interval alone is [0, 0]; the exact bet on 80 independent pairs cannot
    # prove the increase under 1 %, and grouping the pairs must not prove it either.
    from gate.stats.cell_checks import check_cell
    from gate.stats.registry import Rule
    from gate.stats.sequences import EpisodeCounts, EpisodeMean

    zeros = EpisodeMean(80.0, 0.0, 0.0, episodes=40.0, episode_sq=0.0,
                        episode_cross=0.0, episode_n_sq=160.0)  # fmt: skip
    stats = EpisodeCounts(80.0, 0.0, 0.0, difference=zeros)
    rule = Rule(kill_at=0.05, margin=0.01, required=True)
    got = harm_interval(stats, rule, alpha_kill=0.05, alpha_promote=0.05, n_opt=1000.0)
    assert float(np.asarray(got.upper)) >= 0.01
    harmful, inside = check_cell(stats, rule, alpha_kill=0.05, alpha_promote=0.05, n_opt=1000.0)
    assert not bool(np.asarray(inside)) and not bool(np.asarray(harmful))


def test_simulated_canary_episodes_are_each_served_by_one_cohort():
    s = Scenario("canary", pairs=600, episode_len=(5, 20), mode=RolloutMode.CANARY)
    cols = draw_pairs(s, Policy(), 4, np.random.default_rng(39))
    assert cols.episode is not None
    served_by_candidate = np.isfinite(cols.acceptance)  # NaN where the candidate did not serve
    for run in range(4):
        for ep in np.unique(cols.episode[run]):
            sides = served_by_candidate[run][cols.episode[run] == ep]
            assert sides.all() or not sides.any()
    assert 0.3 < served_by_candidate.mean() < 0.7


@pytest.mark.parametrize("episodes", [34, 100])
def test_a_paired_harm_that_fails_whole_conversations_is_not_proven_inside(episodes: int):
    # Shadow twin of the canary case: the candidate fails every pair of 3 % of conversations
    # (harm 0.03, twice the 0.015 margin of `failures`), the baseline none. A run with no
    # such conversation has no discordant pair, and the bet on its pairs as independent
    # proved it inside (34 % of runs at 34 conversations of 30 pairs, 4 % at 100).
    from gate.stats.cell_checks import check_cell
    from gate.stats.registry import Rule

    rng = np.random.default_rng(39)
    runs, length = 400, 30
    bad = rng.random((runs, episodes)) < 0.03
    s = np.where(bad, float(length), 0.0)
    n, worse = float(episodes * length), bad.sum(axis=-1) * float(length)
    ones = np.ones(runs)
    difference = EpisodeMean(
        n * ones, worse, worse, episodes * ones,
        (s * s).sum(axis=-1), (s * length).sum(axis=-1), episodes * length**2 * ones,
    )  # fmt: skip
    cell = EpisodeCounts(n * ones, worse, 0.0 * ones, difference)
    rule = Rule(kill_at=0.0, margin=0.015, required=True)
    _, inside = check_cell(cell, rule, alpha_kill=1e-4, alpha_promote=0.025, n_opt=1000.0)
    # At most the promotion budget: 0.05 let the old 4 % at 100 conversations pass.
    assert float(np.mean(inside)) <= 0.025
