"""Speculative decoding over a causal LM's KV cache: n-gram drafts and one verify pass each.

Plain decoding is the same loop with empty drafts, so both modes share every line but the
draft. Each step feeds the pending token and the draft (k+1 tokens) in one forward pass; the
logits at position i decide the token after it. Greedy keeps drafts while they equal the
argmax. Sampling accepts draft d with probability p(d) and otherwise samples from p with d
removed, which is exact speculative sampling for a draft that puts all its mass on d, so the
output distribution is the plain one's. Rejected positions are cut from the cache.

The verifier is a pure function of one position (`Position`: the target's logits row, the
request's temperature and top_p, and the sampling distribution they give), the draft and a
generator (`VERIFIERS`), and the loop (`speculate`) takes any forward function, so the parity
simulation (`bench/parity_sim.py`) runs these very functions on synthetic distributions.
Every verifier but `exact` is deliberately wrong, a fault-injection tool for testing rollouts
modelled on a public bug report (FIELD_NOTES.md), never a default: `biased-argmax` keeps a
draft exactly when it is the argmax (mode-seeking, gross); `redraw` gives the draft a second
chance (subtle: it moves mass towards likely drafts); `accept-t1` and `accept-bf16` compute
the acceptance probability from a slightly different distribution (smaller still);
`ignore-top-p` samples outside the request's nucleus (nothing when top_p is 1).
`gate.engines.verify_tv` gives each one's exact output distribution at a position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gate.engines.model import TRANSFORMERS_INSTALL, require
from gate.engines.ngram import NgramDrafter
from gate.engines.spec import SpecStats

# (token, accepted): the token at one position and whether it is the draft, accepted.
Choice = tuple[int, bool]
Verifier = Callable[[Any, "Position", int, Any], Choice]
# Runs tokens through the model on top of what it has seen; returns one logits row each.
Forward = Callable[[list[int]], Any]
# Keep the first n positions the model has seen (drop rejected drafts).
Truncate = Callable[[int], None]


def target_probs(torch: Any, logits: Any, temperature: float, top_p: float) -> Any:
    """Return the sampling distribution: softmax at `temperature`, cut to `top_p`, in fp64."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_p < 1.0:
        ordered, order = torch.sort(probs, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token always).
        drop = torch.cumsum(ordered, dim=-1) - ordered >= top_p
        probs = probs.clone()
        probs[order[drop]] = 0.0
        probs = probs / probs.sum()
    return probs


@dataclass(frozen=True)
class Position:
    """One drafted position: the target's logits row, the request's sampling, and `probs`."""

    logits: Any
    temperature: float
    top_p: float
    probs: Any  # target_probs(logits, temperature, top_p): what an exact sampler draws from


def exact_verify(torch: Any, probs: Any, draft: int, generator: Any) -> Choice:
    """Accept `draft` with probability p(draft), else sample p without it (exact, point draft)."""
    if float(torch.rand((), generator=generator)) < float(probs[draft]):
        return draft, True
    residual = probs.clone()
    residual[draft] = 0.0
    return int(torch.multinomial(residual / residual.sum(), 1, generator=generator)), False


def biased_argmax_verify(torch: Any, probs: Any, draft: int, generator: Any) -> Choice:
    """Fault injection: accept `draft` when it is the argmax, else sample p (mlxcel #902)."""
    if draft == int(torch.argmax(probs)):
        return draft, True
    return int(torch.multinomial(probs, 1, generator=generator)), False


def redraw_verify(torch: Any, probs: Any, draft: int, generator: Any) -> Choice:
    """Fault injection: keep a draft equal to a sample of p, else draw anew (mlx-swift-lm #459)."""
    # That equality rule is exact for a point-mass draft only when the compared sample is
    # the one emitted; drawing afresh gives the draft a second chance.
    if int(torch.multinomial(probs, 1, generator=generator)) == draft:
        return draft, True
    token = int(torch.multinomial(probs, 1, generator=generator))
    return token, token == draft


def accept_t1_verify(torch: Any, at: Position, draft: int, generator: Any) -> Choice:
    """Fault injection: accept at temperature 1 whatever the request said (lattice #388)."""
    accept = target_probs(torch, at.logits, 1.0, at.top_p)
    return _accept_or_residual(torch, accept, at.probs, draft, generator)


def accept_bf16_verify(torch: Any, at: Position, draft: int, generator: Any) -> Choice:
    """Fault injection: accept from bf16-rounded logits, resample in fp64 (DeepSpec #31)."""
    accept = target_probs(torch, at.logits.bfloat16(), at.temperature, at.top_p)
    return _accept_or_residual(torch, accept, at.probs, draft, generator)


def ignore_top_p_verify(torch: Any, at: Position, draft: int, generator: Any) -> Choice:
    """Fault injection: verify as if top_p were 1, a setting not passed on (cf. dflash #74)."""
    untruncated = target_probs(torch, at.logits, at.temperature, 1.0)
    return exact_verify(torch, untruncated, draft, generator)


def _accept_or_residual(torch: Any, accept: Any, probs: Any, draft: int, generator: Any) -> Choice:
    """Accept `draft` with probability accept[draft], else sample `probs` without it."""
    if float(torch.rand((), generator=generator)) < float(accept[draft]):
        return draft, True
    residual = probs.clone()
    residual[draft] = 0.0
    if float(residual.sum()) <= 0.0:  # p is a point mass on the draft: nothing else to emit
        return draft, True
    return int(torch.multinomial(residual / residual.sum(), 1, generator=generator)), False


def _on_probs(verify: Callable[[Any, Any, int, Any], Choice]) -> Verifier:
    """Adapt a verifier of the sampling distribution alone to the `Position` signature."""

    def verifier(torch: Any, at: Position, draft: int, generator: Any) -> Choice:
        return verify(torch, at.probs, draft, generator)

    verifier.__doc__ = verify.__doc__
    return verifier


# Everything but "exact" is fault injection, chosen only by the explicit `--verify` flag.
VERIFIERS: dict[str, Verifier] = {
    "exact": _on_probs(exact_verify),
    "biased-argmax": _on_probs(biased_argmax_verify),
    "redraw": _on_probs(redraw_verify),
    "accept-t1": accept_t1_verify,
    "ignore-top-p": ignore_top_p_verify,
    "accept-bf16": accept_bf16_verify,
}


@dataclass
class Sampler:
    """Picks the token at one position: argmax, or temperature and top-p sampling."""

    torch: Any
    temperature: float
    top_p: float
    generator: Any = None
    verify: str = "exact"

    def choose(self, logits: Any, draft: int | None) -> Choice:
        """Return the token at this position and whether it is the draft, accepted."""
        if self.temperature <= 0.0:
            token = int(self.torch.argmax(logits))
            return token, token == draft
        probs = target_probs(self.torch, logits, self.temperature, self.top_p)
        if draft is not None:
            at = Position(logits, self.temperature, self.top_p, probs)
            return VERIFIERS[self.verify](self.torch, at, draft, self.generator)
        return int(self.torch.multinomial(probs, 1, generator=self.generator)), False


LOGPROBS_MODES = ("raw", "processed")
LOGPROB_FLOOR = -9999.0


@dataclass
class TokenLogprobs:
    """Collects each emitted token's log-probability and the `top` most likely alternatives.

    `raw` (vLLM's raw_logprobs): log_softmax of the target's logits at temperature 1.
    `processed` (vLLM's processed_logprobs): the log of the distribution the sampler draws
    from, after the request's temperature and top_p (`target_probs`); tokens top_p cuts are
    -inf and left out of the top lists. Greedy requests use temperature 1 and no top_p cut, as
    vLLM's greedy path returns logprobs before temperature and top_p.
    """

    torch: Any
    top: int = 0
    entries: list[tuple[int, float, list[tuple[int, float]]]] | None = None
    mode: str = "raw"
    temperature: float = 1.0
    top_p: float = 1.0

    def record(self, row: Any, token: int) -> None:
        """Note `token`'s log-probability in `row`, with the `top` most likely alternatives."""
        logp = self._logp(row)
        best: list[tuple[int, float]] = []
        if self.top:
            values, ids = self.torch.topk(logp, min(self.top, logp.shape[-1]))
            best = [
                (int(i), float(v))
                for v, i in zip(values, ids, strict=True)
                if float(v) > float("-inf")
            ]
        if self.entries is None:
            self.entries = []
        # A token the sampling distribution cuts (a lossy verifier's) has log 0 = -inf, which
        # JSON cannot carry: floor it where vLLM's OpenAI server does.
        self.entries.append((token, max(float(logp[token]), LOGPROB_FLOOR), best))

    def _logp(self, row: Any) -> Any:
        if self.mode == "raw" or self.temperature <= 0.0:
            return self.torch.log_softmax(row.double(), dim=-1)
        return self.torch.log(target_probs(self.torch, row, self.temperature, self.top_p))


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
    logprobs: TokenLogprobs | None = None,
) -> Iterator[list[int]]:
    """Yield the tokens of each model step: one when plain, up to k+1 when drafts hold."""
    cache = _new_cache(model)

    def forward(tokens: list[int]) -> Any:
        return _forward(model, torch, tokens, cache)

    with torch.inference_mode():
        yield from speculate(
            forward,
            lambda keep: _truncate(cache, keep),
            prompt,
            sampler=sampler,
            max_tokens=max_tokens,
            drafter=drafter,
            k=k,
            stats=stats,
            logprobs=logprobs,
        )


def speculate(
    forward: Forward,
    truncate: Truncate,
    prompt: list[int],
    *,
    sampler: Sampler,
    max_tokens: int,
    drafter: NgramDrafter | None = None,
    k: int = 0,
    stats: SpecStats | None = None,
    logprobs: TokenLogprobs | None = None,
) -> Iterator[list[int]]:
    """Run the draft-and-verify loop over any model given as `forward` and `truncate`."""
    logits = forward(prompt)
    seen = len(prompt)
    pending, _ = sampler.choose(logits[-1], None)
    if logprobs is not None:
        logprobs.record(logits[-1], pending)
    produced = [pending]
    total = 1
    while True:
        if drafter is not None:
            drafter.extend(produced)
        yield produced
        budget = max_tokens - total - 1  # a step yields at most len(draft) + 1 tokens
        draft = drafter.propose(min(k, budget)) if drafter is not None else []
        kept = seen + 1
        rows = forward([pending, *draft])
        produced = _verify(sampler, rows, draft, logprobs)
        accepted = len(produced) - 1
        if stats is not None:
            stats.observe(len(draft), accepted)
        seen = kept + accepted
        truncate(seen)
        pending = produced[-1]
        total += len(produced)


def _verify(
    sampler: Sampler, rows: Any, draft: list[int], logprobs: TokenLogprobs | None
) -> list[int]:
    produced: list[int] = []
    for i in range(len(draft) + 1):
        token, accepted = sampler.choose(rows[i], draft[i] if i < len(draft) else None)
        if logprobs is not None:
            logprobs.record(rows[i], token)
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
