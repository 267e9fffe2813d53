"""Answer pools drawn with the engine's real verifiers, for sampled-parity simulation.

A synthetic target model gives next-token logits over a 64-token vocabulary (token 0 is
EOS): a Markov background, a copy bonus on the token that followed the latest earlier
occurrence of the last two tokens (so n-gram drafts from the prompt are often right),
and an end-of-sequence logit that rises with the answer's length. Answers are generated
by `gate.engines.decode.speculate` with `Sampler` and the real verifiers and the real
`NgramDrafter`, at temperature 0.8: `baseline` plain sampling, `exact` n-gram speculation
with the exact verifier, `biased` with `biased-argmax` (a fault-injection verifier).
Each answer's statistics come from `gate.parity` (mean log-prob from the engine's
`TokenLogprobs`). `bench/parity_sim.py` and `gate simulate`'s parity scenarios read them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from gate.engines.decode import Sampler, TokenLogprobs, speculate
from gate.engines.ngram import NgramDrafter
from gate.engines.spec import NgramConfig, SpecStats
from gate.parity import STATISTICS, answer_stats

VOCAB, EOS = 64, 0
TEMPERATURE, MAX_TOKENS = 0.8, 96
SPEC = NgramConfig(num_speculative_tokens=8, prompt_lookup_min=2, prompt_lookup_max=3)
VARIANTS = ("baseline", "exact", "biased")


class CopyModel:
    """A toy LM with a KV-cache-like history: forward appends tokens, truncate cuts it."""

    def __init__(self, background: Any, prompt_len: int, copy_bonus: float) -> None:
        self.background, self.prompt_len, self.copy_bonus = background, prompt_len, copy_bonus
        self.history: list[int] = []

    def forward(self, tokens: list[int]) -> Any:
        """Append `tokens`; return the next-token logits after each."""
        import torch

        rows = []
        for token in tokens:
            self.history.append(token)
            rows.append(self._logits())
        return torch.stack(rows)

    def truncate(self, keep: int) -> None:
        """Keep the first `keep` positions."""
        del self.history[keep:]

    def _logits(self) -> Any:
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


def decode(
    model: CopyModel,
    prompt: list[int],
    sampler: Sampler,
    *,
    stats: SpecStats | None,
    logprobs: TokenLogprobs | None = None,
) -> Any:
    """Start the engine's decode loop on the copy model: n-gram drafts of `SPEC` when
    `stats` is given (speculative), plain sampling otherwise."""
    drafter = NgramDrafter(prompt, n_min=SPEC.prompt_lookup_min, n_max=SPEC.prompt_lookup_max)
    return speculate(
        model.forward,
        model.truncate,
        prompt,
        sampler=sampler,
        max_tokens=MAX_TOKENS,
        drafter=drafter if stats is not None else None,
        k=SPEC.num_speculative_tokens if stats is not None else 0,
        stats=stats,
        logprobs=logprobs,
    )


@dataclass(frozen=True)
class Answer:
    """One generated answer's statistics and how it ended."""

    finish: str
    stats: dict[str, float]
    drafted: int
    accepted: int


def generate(
    prompt: list[int],
    background: Any,
    variant: str,
    gen: Any,
    copy_bonus: float = 2.0,
) -> Answer:
    """Sample one answer with the engine's decode loop and verifier."""
    import torch

    model = CopyModel(background, len(prompt), copy_bonus=copy_bonus)
    spec = variant != "baseline"
    verify = "biased-argmax" if variant == "biased" else "exact"
    sampler = Sampler(torch, TEMPERATURE, 1.0, gen, verify)
    stats = SpecStats(SPEC.num_speculative_tokens) if spec else None
    recorder = TokenLogprobs(torch)
    tokens: list[int] = []
    finish = "length"
    steps = decode(model, prompt, sampler, stats=stats, logprobs=recorder)
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
    import torch

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


@functools.cache
def cached_pools(prompts: int, answers: int, seed: int, copy_bonus: float = 2.0) -> dict[str, Any]:
    """Return `build_pools` once per argument set (simulations draw many runs from one)."""
    import torch

    torch.set_num_threads(1)
    return build_pools(prompts, answers, seed, copy_bonus)
