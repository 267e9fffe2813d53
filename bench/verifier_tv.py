"""Mean per-token total variation of each verifier on the synthetic copy model.

The target is `gate.engines.answer_pools.CopyModel` (a Markov background over 64 tokens, a
copy bonus on what followed the latest earlier occurrence of the last two tokens, a rising
EOS logit), prompts that repeat themselves in part, as `build_pools` makes them, decoded by
`gate.engines.decode.speculate` with n-gram drafts (k = 8, lookup 2-3) at temperature 0.8,
as `answer_pools.generate` does. At every emitted token (up to and including EOS, or the
96-token limit) the exact distance between what the verifier emits and the target's
distribution is taken from `gate.engines.verify_tv.token_tv`; a position without a draft
is sampled plainly, so it counts as 0. The mean is over all emitted tokens of all answers.

Usage: python bench/verifier_tv.py [--prompts 8] [--answers 6] [--seed 7] [--top-p 1.0]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from gate.engines.answer_pools import EOS, MAX_TOKENS, SPEC, TEMPERATURE, VOCAB, CopyModel, decode
from gate.engines.decode import VERIFIERS, Position, Sampler, target_probs
from gate.engines.spec import SpecStats
from gate.engines.verify_tv import token_tv


@dataclass
class MeasuringSampler(Sampler):
    """The engine's sampler, noting the exact TV of the token chosen at each position."""

    tvs: list[float] = field(default_factory=list)

    def choose(self, logits: Any, draft: int | None) -> tuple[int, bool]:
        """Note this position's TV (0 without a draft), then choose as the engine does."""
        tv = 0.0
        if draft is not None and self.temperature > 0.0:
            probs = target_probs(self.torch, logits, self.temperature, self.top_p)
            at = Position(logits, self.temperature, self.top_p, probs)
            tv = token_tv(self.torch, self.verify, at, draft)
        self.tvs.append(tv)
        return super().choose(logits, draft)


def answer_tvs(
    prompt: list[int], background: Any, verify: str, gen: Any, top_p: float
) -> tuple[list[float], SpecStats]:
    """Decode one answer; return the TV of each emitted token (EOS included) and the stats."""
    model = CopyModel(background, len(prompt), copy_bonus=2.0)
    sampler = MeasuringSampler(torch, TEMPERATURE, top_p, gen, verify)
    stats = SpecStats(SPEC.num_speculative_tokens)
    steps = decode(model, prompt, sampler, stats=stats)
    emitted = 0
    for produced in steps:
        ended = EOS in produced
        emitted += produced.index(EOS) + 1 if ended else len(produced)
        if ended or emitted >= MAX_TOKENS:
            break
    steps.close()
    return sampler.tvs[: min(emitted, MAX_TOKENS)], stats


def measure(verify: str, prompts: int, answers: int, seed: int, top_p: float) -> dict[str, float]:
    """Return the mean TV over all emitted tokens, over drafted ones, and the acceptance."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    sums: list[float] = []
    counts: list[int] = []
    positive = drafted = accepted = 0
    for _ in range(prompts):
        background = torch.from_numpy(rng.normal(0.0, 1.5, (VOCAB, VOCAB))).float()
        base = rng.integers(1, VOCAB, 24).tolist()
        prompt = base + base[: rng.integers(8, 20)]
        for _ in range(answers):
            answer, stats = answer_tvs(prompt, background, verify, gen, top_p)
            sums.append(sum(answer))
            counts.append(len(answer))
            positive += sum(1 for tv in answer if tv > 0.0)
            drafted += stats.num_draft_tokens
            accepted += stats.num_accepted_draft_tokens
    s, n = np.array(sums), np.array(counts, dtype=float)
    mean = s.sum() / n.sum()
    # The ratio estimator's standard error, answers as the independent units.
    se = np.sqrt(((s - mean * n) ** 2).sum() / (len(n) * (len(n) - 1))) / n.mean()
    return {
        "tokens": float(n.sum()),
        "mean_tv": float(mean),
        "se": float(se),
        "tv_positive_share": positive / n.sum(),
        "acceptance": accepted / drafted if drafted else 0.0,
    }


def main() -> None:
    """Print each verifier's mean per-token TV."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--answers", type=int, default=6, help="answers per prompt")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--top-p", type=float, default=1.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"T={TEMPERATURE} top_p={args.top_p} {args.prompts}x{args.answers} answers each")
    for verify in VERIFIERS:
        m = measure(verify, args.prompts, args.answers, args.seed, args.top_p)
        print(
            f"{verify:>14}: mean per-token TV {m['mean_tv']:.4f} (se {m['se']:.4f}) over"
            f" {m['tokens']:.0f} tokens; TV > 0 at {m['tv_positive_share']:.1%};"
            f" draft acceptance {m['acceptance']:.3f}"
        )


if __name__ == "__main__":
    main()
