"""Canary rates when every request of an episode is served by one cohort (issue 39)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gate.db.enums import RolloutMode
from gate.stats import registry
from gate.stats.cell_checks import check_cell, harm_interval
from gate.stats.cumulative import looks_every, to_stats
from gate.stats.ids import ALL, Cell, MetricId
from gate.stats.policy import Policy, at_stage
from gate.stats.registry import Family, Rule, rule_for
from gate.stats.rule import apply_rule
from gate.stats.sequences import CohortCounts, EpisodeCohorts, EpisodeMean, cohort_values
from gate.stats.simulated_pairs import Scenario, draw_pairs

POLICY = at_stage(Policy(), 0)
CANARY = RolloutMode.CANARY
EVAL = Cell(MetricId("eval", "eval0"), ALL)
# A/A with long conversations and a bad outcome on half the requests: a cohort drawn per
# episode moves each cohort's bad count by whole episodes, far more than a coin per request.
STICKY_AA = Scenario(
    "canary A/A", pairs=3000, every=250, pass_rate=0.5, episode_len=(20, 40), mode=CANARY
)


def rate_kills(s: Scenario, runs: int, seed: int, *, episodes: bool = True) -> int:
    """Return how many runs a canary rate guardrail (unpaired rates) ever kills."""
    cols = draw_pairs(s, POLICY, runs, np.random.default_rng(seed))
    if not episodes:
        cols = replace(cols, episode=None)
    looks = looks_every(s.pairs, s.every)
    ev = apply_rule(POLICY, to_stats(cols, POLICY, looks, mode=CANARY))
    rates = {
        str(g.id) for g in registry.tested(CANARY) if g.family(CANARY) is Family.UNPAIRED_RATES
    }
    killed = np.zeros(runs, dtype=bool)
    for (metric, _), flag in ev.harmful.items():
        if metric in rates or metric.startswith("eval:"):
            killed |= np.broadcast_to(flag, ev.code.shape).any(axis=-1)
    return int(killed.sum())


def test_canary_rates_keep_their_level_when_cohorts_are_drawn_per_episode():
    # Judged as independent requests these runs are killed far above the kill budget.
    assert rate_kills(STICKY_AA, 30, 39, episodes=False) >= 10
    assert rate_kills(STICKY_AA, 30, 39) <= 2


def test_a_cohort_coin_per_request_is_judged_as_before():
    s = replace(STICKY_AA, sticky=False)
    assert rate_kills(s, 30, 39) <= 2


def test_episodes_of_one_request_keep_the_exact_bet_unchanged():
    s = replace(STICKY_AA, pairs=1500, every=500)
    cols = draw_pairs(s, POLICY, 1, np.random.default_rng(7))
    looks = looks_every(s.pairs, s.every)
    own = to_stats(replace(cols, episode=np.arange(s.pairs)[None, :]), POLICY, looks, mode=CANARY)
    plain = to_stats(replace(cols, episode=None), POLICY, looks, mode=CANARY)
    assert isinstance(own.cells[EVAL], EpisodeCohorts)
    assert type(plain.cells[EVAL]) is CohortCounts
    rule = rule_for(POLICY, str(EVAL.metric), ALL)
    assert rule is not None
    kw = {"alpha_kill": 0.001, "alpha_promote": 0.025, "n_opt": 1000.0}
    a, b = harm_interval(own.cells[EVAL], rule, **kw), harm_interval(plain.cells[EVAL], rule, **kw)
    for u, v in zip((a.lower, a.upper), (b.lower, b.upper), strict=True):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(apply_rule(POLICY, own).code, apply_rule(POLICY, plain).code)


def test_sticky_episodes_widen_the_canary_rate_interval():
    cols = draw_pairs(STICKY_AA, POLICY, 1, np.random.default_rng(8))
    looks = looks_every(STICKY_AA.pairs, STICKY_AA.pairs)
    named = to_stats(cols, POLICY, looks, mode=CANARY).cells[EVAL]
    alone = to_stats(replace(cols, episode=None), POLICY, looks, mode=CANARY).cells[EVAL]
    rule = rule_for(POLICY, str(EVAL.metric), ALL)
    assert rule is not None
    kw = {"alpha_kill": 0.001, "alpha_promote": 0.025, "n_opt": 1000.0}
    wide, narrow = harm_interval(named, rule, **kw), harm_interval(alone, rule, **kw)
    width = (np.asarray(wide.upper) - wide.lower)[0, -1]
    assert width > 2.0 * (np.asarray(narrow.upper) - narrow.lower)[0, -1]


def test_thumbs_down_rated_by_conversation_keep_their_level_in_canary():
    # Whole conversations rated alike, one in ten thumbs-down (a user who dislikes a topic
    # dislikes every answer): the share moves by whole episodes, as the evaluators' above.
    s = replace(STICKY_AA, pass_rate=0.999)
    runs = 30
    rng = np.random.default_rng(40)
    cols = draw_pairs(s, POLICY, runs, rng)
    assert cols.episode is not None
    down = rng.random((runs, int(cols.episode.max()) + 1)) < 0.1
    rating = np.take_along_axis(down, cols.episode, axis=-1).astype(np.float64)
    served = np.isfinite(cols.e2e) | cols.failed
    cols = replace(cols, feedback=np.where(served, rating[..., None], np.nan))
    looks = looks_every(s.pairs, s.every)
    cell = Cell(MetricId("feedback"), ALL)
    kills = {}
    for named in (True, False):
        judged = cols if named else replace(cols, episode=None)
        ev = apply_rule(POLICY, to_stats(judged, POLICY, looks, mode=CANARY))
        kills[named] = int(np.broadcast_to(ev.harmful[cell], ev.code.shape).any(axis=-1).sum())
    assert kills[False] >= 8, kills  # judged as independent requests
    assert kills[True] <= 2, kills


def test_cohort_imbalance_hold_counts_episodes_when_cohorts_are_drawn_per_episode():
    # The cohort is drawn once per conversation, so the candidate's share of requests
    # moves by whole episodes: tested as independent requests, an A/A canary with long
    # conversations is held for cohort imbalance in a fifth of runs at a level of ~1e-4.
    s = replace(STICKY_AA, pairs=6000, every=100)
    runs = 60
    cols = draw_pairs(s, POLICY, runs, np.random.default_rng(5))
    looks = looks_every(s.pairs, s.every)
    named = apply_rule(POLICY, to_stats(cols, POLICY, looks, mode=CANARY))
    alone = apply_rule(POLICY, to_stats(replace(cols, episode=None), POLICY, looks, mode=CANARY))
    assert int(alone.imbalanced.any(axis=-1).sum()) >= 5  # judged as independent requests
    assert int(named.imbalanced.any(axis=-1).sum()) == 0
    # A real imbalance (half the episodes where 20 % were expected) is still caught.
    off = apply_rule(POLICY, to_stats(cols, POLICY, looks, mode=CANARY, candidate_share=0.2))
    assert int(off.imbalanced.any(axis=-1).sum()) >= runs - 2


@pytest.mark.parametrize("episodes", [34, 100])
def test_a_harm_that_fails_whole_conversations_is_not_proven_inside(episodes: int):
    # The candidate fails every request of 3 % of its conversations (harm 0.03, twice the
    # 0.015 margin of `failures`), the baseline none. A run whose ~17 candidate episodes
    # happen to hold none of them has no bad request at all: the clustered interval is a
    # point at 0, and the bet on ~500 "independent" candidate requests proved it inside
    # (58 % of runs at 34 conversations, 26 % at 100). Where few episodes hold a bad request
    # the clustered variance is now floored by the worst within-episode correlation.
    rng = np.random.default_rng(39)
    runs, length, w = 400, 30, 0.5
    _, high = cohort_values(w)
    bad = (rng.random((runs, episodes)) < w) & (rng.random((runs, episodes)) < 0.03)
    s = np.where(bad, high * length, 0.0)
    n, cand = float(episodes * length), bad.sum(axis=-1) * float(length)
    ones = np.ones(runs)
    difference = EpisodeMean(
        n * ones, s.sum(axis=-1), high * high * cand, episodes * ones,
        (s * s).sum(axis=-1), (s * length).sum(axis=-1), episodes * length**2 * ones,
    )  # fmt: skip
    cell = EpisodeCohorts(n * ones, cand, 0.0 * ones, w, difference)
    rule = Rule(kill_at=0.0, margin=0.015, required=True)
    _, inside = check_cell(cell, rule, alpha_kill=1e-4, alpha_promote=0.025, n_opt=1000.0)
    # At most the promotion budget (the twin in test_episodes.py: 0.05 let the old 4 % pass).
    assert float(np.mean(inside)) <= 0.025
