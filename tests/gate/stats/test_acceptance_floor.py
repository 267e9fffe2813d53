"""The acceptance floor's time-uniform error rates at small n, by seeded simulation.

Per-request acceptance is bounded in [0, 1] but skewed (a poor draft: Beta(1, 9)) or
lumpy (a few requests accept nothing), and a segment has only a few hundred requests
early on. With the floor exactly at the true mean, the gate looks after every 5th request
up to 300 and counts the runs it ever killed (kill side) or ever proved above the floor
(promotion side), at alpha = 0.05 per side. A confidence sequence promises each rate
<= alpha; the asymptotic Gaussian mixture the floor used broke that (8.4 % and 30 % in
`bench/gate_coverage.py`). The assertions are on counts: the rate's 95 % Clopper-Pearson
interval must reach down to alpha.
"""

from __future__ import annotations

import numpy as np
import pytest

from gate.stats.betting import BET_FRACTIONS, bounded_log_wealth
from gate.stats.cell_checks import check_cell, harm_interval
from gate.stats.gate_stats import GateStats
from gate.stats.policy import ALL, Policy, load_policy
from gate.stats.registry import Rule, rule_for
from gate.stats.rule import apply_rule
from gate.stats.sequences import EpisodeMean, FloatArray, MeanStats
from gate.stats.simulate import clopper_pearson

ALPHA = 0.05
RUNS = 1500
LOOKS = 300
EVERY = 5


def _running(x: FloatArray, every: int = 1) -> MeanStats:
    """Return the running count, sum and sum of squares after every `every`th value."""
    at = slice(every - 1, None, every)
    n = np.broadcast_to(np.arange(1, x.shape[-1] + 1, dtype=np.float64), x.shape)
    return MeanStats(n[..., at], np.cumsum(x, axis=-1)[..., at], np.cumsum(x * x, axis=-1)[..., at])


def _floor_rule(floor: float) -> Rule:
    policy = load_policy(f"guardrails: {{acceptance: {{floor: {floor}}}}}")
    rule = rule_for(policy, "acceptance", ALL)
    assert rule is not None and rule.floor == floor
    return rule


def _ever(x: FloatArray, floor: float) -> tuple[int, int]:
    """Return runs ever killed and runs ever proven above the floor."""
    got = harm_interval(
        _running(x, EVERY), _floor_rule(floor), alpha_kill=ALPHA, alpha_promote=ALPHA, n_opt=200.0
    )
    killed = (np.asarray(got.lower) > 0.0).any(axis=-1)
    promoted = (np.asarray(got.upper) < 0.0).any(axis=-1)
    return int(killed.sum()), int(promoted.sum())


def _within_alpha(count: int) -> bool:
    rate, lo, hi = clopper_pearson(count, RUNS)
    print(f"\n{count} / {RUNS} = {rate:.4f} [{lo:.4f}, {hi:.4f}]")
    return lo <= ALPHA


def test_a_skewed_draft_at_its_floor_is_killed_at_most_alpha_of_the_time():
    # Beta(1, 9): mean 0.1, right-skewed; floor 0.1.
    x = np.random.default_rng(23).beta(1.0, 9.0, (RUNS, LOOKS))
    killed, _ = _ever(x, 0.1)
    assert _within_alpha(killed)


def test_rare_zero_acceptance_does_not_prove_a_draft_above_its_floor():
    # 5 % of requests accept nothing, the rest Beta(18, 2): mean 0.95 x 0.9 = 0.855.
    rng = np.random.default_rng(29)
    x = np.where(rng.random((RUNS, LOOKS)) < 0.05, 0.0, rng.beta(18.0, 2.0, (RUNS, LOOKS)))
    _, promoted = _ever(x, 0.855)
    assert _within_alpha(promoted)


@pytest.mark.parametrize("mean", [0.05, 0.18, 0.2, 0.22, 0.7])
def test_the_decision_is_the_reported_interval_against_the_floor(mean: float):
    # Segment `chat` at the default floor 0.2, 40 looks at growing n; the rule's kill and
    # "inside" flags are exactly the harm interval's bounds against 0.
    policy = Policy()
    x = np.random.default_rng(int(mean * 100)).beta(10 * mean, 10 * (1 - mean), 4000)
    cell = _running(x, 100)
    flags = apply_rule(policy, GateStats(cells={("acceptance", "chat"): cell}))
    rule = rule_for(policy, "acceptance", "chat")
    assert rule is not None
    got = harm_interval(
        cell, rule, alpha_kill=flags.alpha_kill_each, alpha_promote=policy.alpha_promote,
        n_opt=policy.n_opt("chat"),
    )  # fmt: skip
    key = ("acceptance", "chat")
    assert (flags.harmful[key] == (np.asarray(got.lower) > 0.0)).all()
    assert (flags.inside[key] == (np.asarray(got.upper) < 0.0)).all()
    if mean < 0.2 - 0.1 or mean > 0.2 + 0.1:
        assert (flags.harmful[key] if mean < 0.2 else flags.inside[key])[-1]


def test_bounded_log_wealth_golden():
    # 100 requests, sum 10, sum of squares 2: against the floor 0.2 from below, and
    # against 0.05 from above; nothing at n=0.
    stats = MeanStats(100.0, 10.0, 2.0)
    assert float(bounded_log_wealth(stats, 0.2, above=False)) == pytest.approx(4.58174057219013)
    assert float(bounded_log_wealth(stats, 0.05, above=True)) == pytest.approx(2.156167608853133)
    assert float(bounded_log_wealth(MeanStats(0.0, 0.0, 0.0), 0.3, above=True)) == 0.0


def _exact_log_capital(x: FloatArray, m: float, *, above: bool) -> float:
    """Return the log of the equal-weight mixture of products 1 + f xi over the values."""
    xi = (x - m) / m if above else (m - x) / (1.0 - m)
    logs = np.log1p(BET_FRACTIONS[:, None] * xi[None, :]).sum(axis=1)
    return float(np.log(np.mean(np.exp(logs - logs.max()))) + logs.max())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_bound_is_below_the_capital_and_monotone_in_m(seed: int):
    # Validity: never above the exact capital of the same bets at the same m, so Ville's
    # inequality carries over; monotone, so the interval is where the capital is small.
    rng = np.random.default_rng(seed)
    x = np.where(rng.random(200) < 0.1, 0.0, rng.beta(2.0, 5.0, 200))
    stats = MeanStats(float(x.size), float(x.sum()), float((x * x).sum()))
    grid = np.linspace(0.01, 0.99, 99)
    for above in (True, False):
        bound = bounded_log_wealth(stats, grid, above=above)
        exact = [_exact_log_capital(x, m, above=above) for m in grid]
        assert (bound <= np.asarray(exact) + 1e-9).all()
        steps = np.diff(bound)
        assert (steps <= 1e-12).all() if above else (steps >= -1e-12).all()


def test_with_episodes_the_floor_is_not_proven_on_pairs_alone():
    # 40 conversations of 25 requests: half accept 0.75 of drafts, half 0.35 (mean 0.55,
    # floor 0.5). As 1,000 independent requests the bet proves the floor; with the
    # conversation as the unit (40 of them) it is not proven either way (issue 39).
    rule = _floor_rule(0.5)
    rng = np.random.default_rng(39)
    level = np.repeat(np.where(np.arange(40) % 2 == 0, 0.75, 0.35), 25)
    x = np.clip(level + rng.normal(0.0, 0.05, level.size), 0.0, 1.0)
    episode = np.repeat(np.arange(40), 25)
    sums = np.bincount(episode, weights=x)
    plain = MeanStats(float(x.size), float(x.sum()), float((x * x).sum()))
    clustered = EpisodeMean(
        plain.n, plain.total, plain.total_sq, 40.0,
        float((sums * sums).sum()), float((sums * 25).sum()), 40.0 * 25**2,
    )  # fmt: skip
    levels = {"alpha_kill": 0.005, "alpha_promote": 0.025, "n_opt": 1000.0}
    _, inside_alone = check_cell(plain, rule, **levels)
    harmful, inside = check_cell(clustered, rule, **levels)
    assert bool(inside_alone) and not bool(inside) and not bool(harmful)
    got = harm_interval(clustered, rule, **levels)
    alone = harm_interval(plain, rule, **levels)
    assert float(got.upper) > 0.0 > float(alone.upper)
