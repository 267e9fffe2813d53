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
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gate.engines.decode import Sampler, TokenLogprobs, speculate
from gate.engines.ngram import NgramDrafter
from gate.engines.spec import NgramConfig, SpecStats
from gate.parity import STATISTICS, Side, answer_stats, control_margin, eligibility, parity_test
from gate.stats.cumulative import looks_every
from gate.stats.policy import Policy
from gate.stats.registry import kill_slots
from gate.stats.sequences import MeanStats
from gate.stats.simulate import Scenario, clopper_pearson, run_scenario

VOCAB, EOS = 64, 0
TEMPERATURE, MAX_TOKENS = 0.8, 96
SPEC = NgramConfig(num_speculative_tokens=8, prompt_lookup_min=2, prompt_lookup_max=3)
VARIANTS = ("baseline", "exact", "biased")


class CopyModel:
    """A toy LM with a KV-cache-like history: forward appends tokens, truncate cuts it."""

    def __init__(self, background: torch.Tensor, prompt_len: int, copy_bonus: float) -> None:
        self.background, self.prompt_len, self.copy_bonus = background, prompt_len, copy_bonus
        self.history: list[int] = []

    def forward(self, tokens: list[int]) -> torch.Tensor:
        """Append `tokens`; return the next-token logits after each."""
        rows = []
        for token in tokens:
            self.history.append(token)
            rows.append(self._logits())
        return torch.stack(rows)

    def truncate(self, keep: int) -> None:
        """Keep the first `keep` positions."""
        del self.history[keep:]

    def _logits(self) -> torch.Tensor:
        h = self.history
        row = self.background[h[-1]].clone()
        tail = tuple(h[-2:])
        for start in range(len(h) - 3, 0, -1):  # the latest earlier occurrence of the tail
            if (h[start - 1], h[start]) == tail:
                row[h[start + 1]] += self.copy_bonus
                break
        generated = len(h) - self.prompt_len
        row[EOS] = -4.0 + 0.1 * generated
        return row


@dataclass(frozen=True)
class Answer:
    """One generated answer's statistics and how it ended."""

    finish: str
    stats: dict[str, float]
    drafted: int
    accepted: int


def generate(
    prompt: list[int],
    background: torch.Tensor,
    variant: str,
    gen: torch.Generator,
    copy_bonus: float = 2.0,
) -> Answer:
    """Sample one answer with the engine's decode loop and verifier."""
    model = CopyModel(background, len(prompt), copy_bonus=copy_bonus)
    spec = variant != "baseline"
    verify = "biased-argmax" if variant == "biased" else "exact"
    sampler = Sampler(torch, TEMPERATURE, 1.0, gen, verify)
    stats = SpecStats(SPEC.num_speculative_tokens) if spec else None
    drafter = NgramDrafter(prompt, n_min=SPEC.prompt_lookup_min, n_max=SPEC.prompt_lookup_max)
    recorder = TokenLogprobs(torch)
    tokens: list[int] = []
    finish = "length"
    steps = speculate(
        model.forward,
        model.truncate,
        prompt,
        sampler=sampler,
        max_tokens=MAX_TOKENS,
        drafter=drafter if spec else None,
        k=SPEC.num_speculative_tokens if spec else 0,
        stats=stats,
        logprobs=recorder,
    )
    for produced in steps:
        for token in produced:
            if token == EOS:
                finish = "stop"
                break
            tokens.append(token)
        if finish == "stop" or len(tokens) >= MAX_TOKENS:
            break
    steps.close()
    tokens = tokens[:MAX_TOKENS]
    logprobs = [lp for _, lp, _ in (recorder.entries or [])][: len(tokens)]
    s = answer_stats(tokens, logprobs)
    values = {"mean_logprob": s.mean_logprob or 0.0, "length": s.length, "distinct_2": s.distinct_2}
    if stats is None:
        return Answer(finish, values, 0, 0)
    return Answer(finish, values, stats.num_draft_tokens, stats.num_accepted_draft_tokens)


def build_pools(prompts: int, answers: int, seed: int, copy_bonus: float = 2.0) -> dict[str, Any]:
    """Generate `answers` answers per prompt and variant; return stat arrays and finishes."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    stats = {v: np.zeros((prompts, answers, len(STATISTICS))) for v in VARIANTS}
    natural = {v: np.zeros((prompts, answers), dtype=bool) for v in VARIANTS}
    drafted = {v: [0, 0] for v in VARIANTS}
    for p in range(prompts):
        background = torch.from_numpy(rng.normal(0.0, 1.5, (VOCAB, VOCAB))).float()
        # A prompt that repeats itself in part, as a text to proofread or edit does.
        base = rng.integers(1, VOCAB, 24).tolist()
        prompt = base + base[: rng.integers(8, 20)]
        for v in VARIANTS:
            for a in range(answers):
                answer = generate(prompt, background, v, gen, copy_bonus)
                stats[v][p, a] = [answer.stats[s] for s in STATISTICS]
                natural[v][p, a] = answer.finish == "stop"
                drafted[v][0] += answer.drafted
                drafted[v][1] += answer.accepted
    rates = {v: round(a / d, 3) for v, (d, a) in drafted.items() if d}
    return {"stats": stats, "natural": natural, "acceptance": rates}


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
    """Return the parity test's kill level: one more family per statistic in the split."""
    slots = kill_slots(policy) + len(STATISTICS) * (len(policy.segments) + 1)
    return policy.alpha_kill / slots


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
    pools = build_pools(args.prompts, args.answers, args.seed, args.copy_bonus)
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
    whole = run_scenario(Scenario("A/A", pairs=5000), policy, runs=args.runs, seed=args.seed + 4)
    either = np.isfinite(null_at) | (whole.codes == 1)
    report("exact sampler: parity kills, to 5,000 eligible pairs", np.isfinite(null_at))
    report("control A/A pairs: parity alarms, to 5,000", np.isfinite(control_at))
    report("default policy A/A (other guardrails), to 5,000", whole.codes == 1)
    report("exact sampler, whole policy + parity, to 5,000", either)
    report("biased-argmax killed within 3,000 eligible pairs", np.isfinite(bias_at))
    q50, q90 = np.nanpercentile(bias_at, [50, 90]) if np.isfinite(bias_at).any() else (0, 0)
    print(f"  biased: pairs to kill median {q50:.0f}, 90th pct {q90:.0f}; by statistic {bias_by}")
    print(f"  exact: kills by statistic {null_by}")
    print(f"  sd of d (mean log-prob): exact {sds.mean():.4f}, biased {bsds.mean():.4f}")
    print(f"  margin (0.1 sd of control d): {margins.mean():.4f}")
    print(f"total {time.perf_counter() - started:.0f} s")


def report(name: str, hits: np.ndarray) -> None:
    """Print a rate with its 95% Clopper-Pearson interval."""
    rate, lo, hi = clopper_pearson(int(hits.sum()), int(hits.size))
    print(f"{name:<55} {rate:.4f} [{lo:.4f}, {hi:.4f}]  ({int(hits.sum())}/{hits.size})")


if __name__ == "__main__":
    main()
