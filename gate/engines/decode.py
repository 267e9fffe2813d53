"""Speculative decoding over a causal LM's KV cache: n-gram drafts and one verify pass each.

Plain decoding is the same loop with empty drafts, so both modes share every line but the
draft. Each step feeds the pending token and the draft (k+1 tokens) in one forward pass; the
logits at position i decide the token after it. Greedy keeps drafts while they equal the
argmax. Sampling accepts draft d with probability p(d) and otherwise samples from p with d
removed, which is exact speculative sampling for a draft that puts all its mass on d, so the
output distribution is the plain one's. Rejected positions are cut from the cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gate.engines.model import TRANSFORMERS_INSTALL, require
from gate.engines.ngram import NgramDrafter
from gate.engines.spec import SpecStats


@dataclass
class Sampler:
    """Picks the token at one position: argmax, or temperature and top-p sampling."""

    torch: Any
    temperature: float
    top_p: float
    generator: Any = None

    def choose(self, logits: Any, draft: int | None) -> tuple[int, bool]:
        """Return the token at this position and whether it is the draft, accepted."""
        if self.temperature <= 0.0:
            token = int(self.torch.argmax(logits))
            return token, token == draft
        probs = self._probs(logits)
        if draft is not None:
            if float(self.torch.rand((), generator=self.generator)) < float(probs[draft]):
                return draft, True
            probs[draft] = 0.0
            probs = probs / probs.sum()
        return int(self.torch.multinomial(probs, 1, generator=self.generator)), False

    def _probs(self, logits: Any) -> Any:
        probs = self.torch.softmax(logits.double() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            ordered, order = self.torch.sort(probs, descending=True)
            # Keep the smallest prefix whose mass reaches top_p (the first token always).
            drop = self.torch.cumsum(ordered, dim=-1) - ordered >= self.top_p
            probs = probs.clone()
            probs[order[drop]] = 0.0
            probs = probs / probs.sum()
        return probs


def decode_steps(
    model: Any,
    torch: Any,
    prompt: list[int],
    *,
    sampler: Sampler,
    max_tokens: int,
    drafter: NgramDrafter | None = None,
    k: int = 0,
    stats: SpecStats | None = None,
) -> Iterator[list[int]]:
    """Yield the tokens of each model step: one when plain, up to k+1 when drafts hold."""
    cache = _new_cache(model)
    with torch.inference_mode():
        logits = _forward(model, torch, prompt, cache)
        pending, _ = sampler.choose(logits[-1], None)
        produced = [pending]
        total = 1
        while True:
            if drafter is not None:
                drafter.extend(produced)
            yield produced
            budget = max_tokens - total - 1  # a step yields at most len(draft) + 1 tokens
            draft = drafter.propose(min(k, budget)) if drafter is not None else []
            kept = cache_length(cache) + 1
            rows = _forward(model, torch, [pending, *draft], cache)
            produced = _verify(sampler, rows, draft)
            accepted = len(produced) - 1
            if stats is not None:
                stats.observe(len(draft), accepted)
            _truncate(cache, kept + accepted)
            pending = produced[-1]
            total += len(produced)


def _verify(sampler: Sampler, rows: Any, draft: list[int]) -> list[int]:
    produced: list[int] = []
    for i in range(len(draft) + 1):
        token, accepted = sampler.choose(rows[i], draft[i] if i < len(draft) else None)
        produced.append(token)
        if not accepted:
            break
    return produced


def _forward(model: Any, torch: Any, tokens: list[int], cache: Any) -> Any:
    """Run the tokens through the model on top of the cache; return their logits rows."""
    ids = torch.tensor([tokens], dtype=torch.long)
    return model(input_ids=ids, past_key_values=cache, use_cache=True).logits[0]


def _new_cache(model: Any) -> Any:
    transformers = require("transformers", TRANSFORMERS_INSTALL)  # the optional extra
    return transformers.DynamicCache(config=model.config)


def cache_length(cache: Any) -> int:
    """Return the number of positions the cache holds."""
    return int(cache.get_seq_length())


def _truncate(cache: Any, keep: int) -> None:
    """Cut the cache to its first `keep` positions (a negative crop removes from the end)."""
    remove = cache_length(cache) - keep
    if remove > 0:
        cache.crop(-remove)
