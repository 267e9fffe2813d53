"""Sampled-parity operating characteristics with the engine's real verifiers.

A synthetic target model gives next-token logits over a 64-token vocabulary (token 0 is
EOS): a Markov background, a copy bonus on the token that followed the latest earlier
occurrence of the last two tokens (so n-gram drafts from the prompt are often right),
and an end-of-sequence logit that rises with the answer's length. Answers are generated
by `gate.engines.decode.speculate` with `Sampler` and the real verifiers (`VERIFIERS`)
and the real `NgramDrafter`, at temperature 0.8:

* baseline: plain sampling (no drafts);
* exact: n-gram speculation with the exact verifier;
* biased: n-gram speculation with `biased-argmax`.

Each answer's statistics come from `gate.parity` (the recorder of the emitted tokens'
log-probabilities is the engine's `TokenLogprobs`). A pool of answers per prompt and
variant is generated once; each simulated rollout draws its pairs from the pools
(a prompt uniformly, then one answer per side), keeps the eligible ones
(`gate.parity.eligibility`: a length-cut side excludes the pair), and runs
`gate.parity.parity_test` on every statistic every `--every` pairs, with the margin from
200 control (baseline-vs-baseline) pairs drawn the same way.

Usage: python bench/parity_sim.py [--answers 600] [--runs 400] [--seed 7] [--copy-bonus 2]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

from gate.cli.gatecmd import with_parity
from gate.engines.answer_pools import MAX_TOKENS, TEMPERATURE, VARIANTS, cached_pools
from gate.parity import STATISTICS, Side, control_margin, eligibility, parity_test
from gate.stats.cumulative import looks_every
from gate.stats.policy import Policy
from gate.stats.registry import alpha_kill_each, kill_slots
from gate.stats.rule import Code
from gate.stats.sequences import MeanStats
from gate.stats.simulate import clopper_pearson, run_scenario
from gate.stats.simulated_pairs import Scenario


def draw_d(
    pools: dict[str, Any], cand: str, base: str, shape: tuple[int, int], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Draw pairs (prompt, one answer per side); return d per statistic and eligibility."""
    prompts, answers = pools["natural"][base].shape
    p = rng.integers(0, prompts, shape)
    i, j = rng.integers(0, answers, shape), rng.integers(0, answers, shape)
    d = pools["stats"][cand][p, i] - pools["stats"][base][p, j]
    ok_c, ok_b = pools["natural"][cand][p, i], pools["natural"][base][p, j]
    # The same rule as live pairs: a side cut by the length limit excludes the pair.
    eligible = np.vectorize(_eligible)(ok_b, ok_c)
    return d, eligible


def _eligible(base_natural: bool, cand_natural: bool) -> bool:
    def side(natural: bool) -> Side:
        return Side(TEMPERATURE, 1.0, MAX_TOKENS, None, None, "stop" if natural else "length")

    return eligibility(side(base_natural), side(cand_natural)).eligible


def first_kill(
    pools: dict[str, Any], cand: str, runs: int, pairs: int, every: int, alpha: float, seed: int
) -> tuple[np.ndarray, dict[str, int], np.ndarray, np.ndarray]:
    """Return each run's first kill (in eligible pairs; NaN: none), by statistic, sd and margin."""
    rng = np.random.default_rng(seed)
    every_look = looks_every(pairs, every)
    n_opt = float(Policy().min_pairs)
    killed_at = np.full(runs, np.nan)
    by_stat = dict.fromkeys(STATISTICS, 0)
    sds, margins = [], []
    for r in range(runs):
        control, ok = draw_d(pools, "baseline", "baseline", (1, 400), rng)
        control = control[0][ok[0]][:200]
        d, ok = draw_d(pools, cand, "baseline", (1, int(pairs * 1.3)), rng)
        d = d[0][ok[0]][:pairs]
        looks = every_look[every_look <= d.shape[0]]  # when many pairs were ineligible
        csum, csq = np.cumsum(d, axis=0), np.cumsum(d * d, axis=0)
        n = looks.astype(float)
        fired_any = np.zeros(looks.size, dtype=bool)
        for k, name in enumerate(STATISTICS):
            cstats = MeanStats(control.shape[0], control[:, k].sum(), (control[:, k] ** 2).sum())
            margin = control_margin(cstats)
            stats = MeanStats(n, csum[looks - 1, k], csq[looks - 1, k])
            fired = parity_test(stats, margin, alpha=alpha, n_opt=n_opt) != 0
            if fired.any():
                by_stat[name] += 1
            fired_any |= fired
            if name == "mean_logprob":
                sds.append(float(d[:, k].std()))
                margins.append(float(margin))
        if fired_any.any():
            killed_at[r] = looks[fired_any.argmax()]
    return killed_at, by_stat, np.array(sds), np.array(margins)


def parity_alpha(policy: Policy) -> float:
    """Return the parity test's kill level: the registry's split with parity enabled."""
    return alpha_kill_each(with_parity(policy))


def main() -> None:
    """Build the pools, run the scenarios and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--answers", type=int, default=600)
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--copy-bonus", type=float, default=2.0, help="logit added to copies")
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    pools = cached_pools(args.prompts, args.answers, args.seed, args.copy_bonus)
    built = time.perf_counter() - started
    for v in VARIANTS:
        means = pools["stats"][v].mean(axis=(0, 1))
        row = ", ".join(f"{s} {m:.4f}" for s, m in zip(STATISTICS, means, strict=True))
        print(f"pool {v:<8} natural end {pools['natural'][v].mean():.3f}  {row}")
    print(f"copy bonus {args.copy_bonus}; acceptance (exact, biased):", pools["acceptance"])
    print(f"pools: {args.prompts} prompts x {args.answers} answers x 3 variants in {built:.0f} s")
    policy = Policy()
    alpha = parity_alpha(policy)
    print(f"parity alpha per test {alpha:.6f} (kill slots {kill_slots(policy)} + parity)")
    null_at, null_by, sds, margins = first_kill(
        pools, "exact", args.runs, 5000, 10, alpha, args.seed + 1
    )
    control_at, _, _, _ = first_kill(pools, "baseline", args.runs, 5000, 10, alpha, args.seed + 2)
    bias_at, bias_by, bsds, _ = first_kill(
        pools, "biased", args.runs, 3000, 10, alpha, args.seed + 3
    )
    whole = run_scenario(
        Scenario("A/A", pairs=5000), with_parity(policy), runs=args.runs, seed=args.seed + 4
    )
    either = np.isfinite(null_at) | (whole.codes == Code.KILL)
    report("exact sampler: parity kills, to 5,000 eligible pairs", np.isfinite(null_at))
    report("control A/A pairs: parity alarms, to 5,000", np.isfinite(control_at))
    report("default policy A/A (other guardrails), to 5,000", whole.codes == Code.KILL)
    report("exact sampler, whole policy + parity, to 5,000", either)
    report("biased-argmax killed within 3,000 eligible pairs", np.isfinite(bias_at))
    q50, q90 = np.nanpercentile(bias_at, [50, 90]) if np.isfinite(bias_at).any() else (0, 0)
    print(f"  biased: pairs to kill median {q50:.0f}, 90th pct {q90:.0f}; by statistic {bias_by}")
    print(f"  exact: kills by statistic {null_by}")
    print(f"  sd of d (mean log-prob): exact {sds.mean():.4f}, biased {bsds.mean():.4f}")
    print(f"  margin (0.1 sd of control d): {margins.mean():.4f}")
    if args.copy_bonus == 2.0:  # the pools `gate simulate` would build: reuse them
        gate_path(args, with_parity(policy))
    print(f"total {time.perf_counter() - started:.0f} s")


def gate_path(args: argparse.Namespace, policy: Policy) -> None:
    """Run the gate itself (registry, replay columns, rule) on pairs from the pools."""
    pool = (args.prompts, args.answers, args.seed)
    print(f"gate path: default policy + parity enabled, kill slots {kill_slots(policy)}")
    for name, sampler, pairs, seed in (
        ("exact", "exact", 5000, args.seed + 5),
        ("biased", "biased", 3000, args.seed + 6),
    ):
        spec = Scenario(f"sampled parity, {name}", pairs=pairs, sampler=sampler, pool=pool)
        out = run_scenario(spec, policy, runs=args.runs, seed=seed)
        killed = out.codes == Code.KILL
        report(f"gate: {name} verifier killed within {pairs:,} pairs", killed)
        if killed.any():
            q50, q90 = np.percentile(out.pairs_at[killed], [50, 90])
            print(f"  pairs to kill median {q50:.0f}, 90th pct {q90:.0f}; {out.kill_reasons}")


def report(name: str, hits: np.ndarray) -> None:
    """Print a rate with its 95% Clopper-Pearson interval."""
    rate, lo, hi = clopper_pearson(int(hits.sum()), int(hits.size))
    print(f"{name:<55} {rate:.4f} [{lo:.4f}, {hi:.4f}]  ({int(hits.sum())}/{hits.size})")


if __name__ == "__main__":
    main()
