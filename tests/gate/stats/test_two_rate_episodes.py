"""Greedy mismatch and the shadow thumbs-down share with episodes as the unit (issue 39)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gate.stats.cell_checks import harm_interval
from gate.stats.cumulative import looks_every, to_stats
from gate.stats.ids import ALL, Cell, MetricId
from gate.stats.policy import Policy, at_stage
from gate.stats.registry import rule_for
from gate.stats.rule import apply_rule
from gate.stats.sequences import EpisodeTwoCounts, TwoCounts
from gate.stats.simulated_pairs import ACCEPTANCE, Scenario, draw_pairs

POLICY = at_stage(Policy(), 0)
GREEDY, FEEDBACK = MetricId("greedy_mismatch"), MetricId("feedback")
CONVERSATIONS = Scenario("two rates", pairs=3000, every=100, episode_len=(5, 20))
RUNS = 80


def _per_episode(rng: np.random.Generator, episode: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Return 0/1 outcomes at ICC 0.5: each episode's rate ~ Beta(p, 1 - p), mean p."""
    n_ep = int(episode.max()) + 1
    rate = rng.beta(p, 1.0 - p, size=(episode.shape[0], n_ep))
    return np.asarray(rng.random(episode.shape) < np.take_along_axis(rate, episode, axis=-1))


def _columns(seed: int, *, harm: float):
    """Return simulated pairs with greedy mismatch (half the episodes the control slice)
    and thumbs-down on both answers, whole conversations failing together (ICC 0.5).

    `harm` > 0: instead, whole candidate conversations fail (every request mismatches and
    is rated down) in a share `harm` of episodes; the control slice and baseline never do.
    """
    rng = np.random.default_rng(seed)
    cols = draw_pairs(CONVERSATIONS, POLICY, RUNS, rng)
    ep = cols.episode
    assert ep is not None
    n_ep = int(ep.max()) + 1
    control = np.take_along_axis(rng.random((RUNS, n_ep)) < 0.5, ep, axis=-1)
    if harm:
        bad_ep = rng.random((RUNS, n_ep)) < harm
        cand = np.take_along_axis(bad_ep, ep, axis=-1) & ~control
        mismatch = cand.astype(np.float64)
        feedback = np.stack([np.zeros(ep.shape), cand.astype(np.float64)], axis=-1)
    else:
        mismatch = _per_episode(rng, ep, np.full(1, 0.1)).astype(np.float64)
        down = [_per_episode(rng, ep, np.full(1, 0.1)) for _ in range(2)]
        feedback = np.stack(down, axis=-1).astype(np.float64)
    return replace(cols, is_control=control, mismatch=mismatch, feedback=feedback)


def _ever(seed: int, *, harm: float, episodes: bool) -> dict[str, float]:
    """Return the share of runs where each two-rate guardrail was ever proven harmful
    (A/A) or proven inside (harm), in any cell."""
    cols = _columns(seed, harm=harm)
    if not episodes:
        cols = replace(cols, episode=None)
    looks = looks_every(CONVERSATIONS.pairs, CONVERSATIONS.every)
    ev = apply_rule(POLICY, to_stats(cols, POLICY, looks))
    flags = ev.inside if harm else ev.harmful
    out = {}
    for metric in (GREEDY, FEEDBACK):
        hit = np.zeros(RUNS, dtype=bool)
        for (m, _), flag in flags.items():
            if m == metric:
                hit |= np.broadcast_to(flag, ev.code.shape).any(axis=-1)
        out[str(metric)] = float(hit.mean())
    return out


def test_conversations_failing_together_do_not_prove_a_harmless_candidate_harmful():
    # Judged as independent trials, whole conversations of mismatches or thumbs-down move
    # a side's rate by whole episodes: a harmless candidate is proven harmful often.
    before = _ever(39, harm=0.0, episodes=False)
    assert min(before.values()) > 0.025, before
    after = _ever(39, harm=0.0, episodes=True)
    assert max(after.values()) <= 0.025, after


def test_a_harm_that_fails_whole_conversations_is_not_proven_inside():
    # Twice the 0.03 margin, in whole conversations: few episodes hold every bad trial.
    before = _ever(40, harm=0.06, episodes=False)
    assert min(before.values()) > 0.025, before
    after = _ever(40, harm=0.06, episodes=True)
    assert max(after.values()) <= 0.025, after


def test_a_large_harm_in_whole_conversations_is_still_killed():
    # A candidate mismatching (and rated down) on every turn of 30 % of its conversations.
    cols = _columns(42, harm=0.3)
    ev = apply_rule(POLICY, to_stats(cols, POLICY, looks_every(CONVERSATIONS.pairs, 100)))
    for metric in (GREEDY, FEEDBACK):
        flag = np.broadcast_to(ev.harmful[Cell(metric, ALL)], ev.code.shape)
        assert flag.any(axis=-1).all(), metric


@pytest.mark.parametrize("metric", [GREEDY, FEEDBACK])
def test_episodes_of_one_pair_keep_the_exact_bet_bit_identical(metric: MetricId):
    cols = _columns(41, harm=0.0)
    own = replace(
        cols, episode=np.broadcast_to(np.arange(cols.segment.shape[-1]), cols.segment.shape)
    )
    looks = looks_every(CONVERSATIONS.pairs, CONVERSATIONS.every)
    alone = apply_rule(POLICY, to_stats(replace(cols, episode=None), POLICY, looks))
    named_stats = to_stats(own, POLICY, looks)
    assert isinstance(named_stats.cells[Cell(metric, ALL)], EpisodeTwoCounts)
    named = apply_rule(POLICY, named_stats)
    for key in (k for k in alone.harmful if k[0] == metric):
        assert np.array_equal(alone.harmful[key], named.harmful[key])
        assert np.array_equal(alone.inside[key], named.inside[key])
    plain = to_stats(replace(cols, episode=None), POLICY, looks).cells[Cell(metric, ALL)]
    assert type(plain) is TwoCounts
    rule = rule_for(POLICY, metric, ALL)
    assert rule is not None
    levels = {"alpha_kill": 1e-3, "alpha_promote": 0.025, "n_opt": 1000.0}
    a = harm_interval(plain, rule, **levels)
    b = harm_interval(named_stats.cells[Cell(metric, ALL)], rule, **levels)
    for end in ("estimate", "lower", "upper"):
        assert np.array_equal(getattr(a, end), getattr(b, end), equal_nan=True)


def _icc(x: np.ndarray, episode: np.ndarray) -> float:
    """Return the one-way ANOVA intra-episode correlation of one run's values."""
    ok = np.isfinite(x)
    x, episode = x[ok], episode[ok]
    codes, group = np.unique(episode, return_inverse=True)
    n = np.bincount(group).astype(float)
    means = np.bincount(group, weights=x) / n
    within = float(((x - means[group]) ** 2).sum()) / (x.size - codes.size)
    between = float((n * (means - x.mean()) ** 2).sum()) / (codes.size - 1)
    n0 = (x.size - (n**2).sum() / x.size) / (codes.size - 1)
    s2_between = (between - within) / n0
    return s2_between / (s2_between + within)


@pytest.mark.parametrize("icc", [0.0, 0.5])
def test_simulated_rates_correlate_within_conversations_at_the_stated_icc(icc: float):
    s = Scenario("rates", pairs=20000, episode_len=(5, 20), rates_icc=icc)
    cols = draw_pairs(s, POLICY, 1, np.random.default_rng(3))
    assert cols.episode is not None and cols.mismatch is not None and cols.feedback is not None
    ep = cols.episode[0]
    # Acceptance's mean differs by segment (a conversation keeps its own): within segments.
    acceptance = cols.acceptance[0] - ACCEPTANCE[cols.segment[0] % ACCEPTANCE.size]
    for x in (cols.mismatch[0], cols.feedback[0, :, 1], acceptance):
        assert _icc(x, ep) == pytest.approx(icc, abs=0.07)
    # The control slice is chosen per conversation.
    control = cols.is_control[0]
    assert all(len(set(control[ep == e])) == 1 for e in np.unique(ep)[:200])
