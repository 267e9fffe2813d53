"""Per-token exactness: what one call's tokens say about its sampler, from `top_logprobs`.

An exact sampler emits each token as a draw from the target's next-token distribution
after the request's temperature, top-k and top-p. Order a position's tokens by
probability; the emitted token then owns the interval [mass above it, mass above it + its
own mass] of [0, 1], and the randomised probability integral transform (a uniform point
of that interval) is Uniform(0, 1) given everything before it. Instead of drawing that
point, a call keeps the expected share of it in each of `BINS` equal bins of [0, 1]: its
fractional bin counts (`TokenFit.bins`), summed over its tokens, and how many of its
tokens were not their position's most likely outcome against the sum of their chances not
to be, and the sum of those chances' squares (`TokenFit.off`, `off_p`, `off_p2`: the
most-likely test's sums). Under the null each token's shares have expectation 1 / `BINS`
per bin whatever came before, so the sums are what a test martingale needs
(`gate.stats.exactness`); only these sums are stored, never the arrays.

`gate.exactness_position` says what makes a token's interval exact (what is tested,
skipped or cut at one position); `gate.exactness_fit` holds the sums and their stored
form. Two rules are applied here, before a position is placed:
* Which alternatives are read: vLLM lists the sampled token whatever its rank, so of k
  asked only the k - 1 most likely are read (`trusted`); the others are unlisted.
* Raw values say nothing of penalties, logit bias or min-p (vLLM takes them before those):
  a raw-mode call that sets one is not tested (`raw_describes`).

`exactness_fields` is the public entry: a call's OpenAI-format `logprobs` object (chat
`content` entries, or the completions columns) plus its sampling parameters in, the
stored fields out (`TokenFit.as_dict`; the replay schema's side `exactness`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gate.exactness_fit import BINS, TokenFit, occupancy
from gate.exactness_position import EOS, MODES, Mode, Sampling, Stops, place

# `gate.stats.record_columns` reads the stored sums through this module.
__all__ = ["BINS", "TokenFit", "exactness_fields", "raw_describes", "trusted"]

# Request settings that change the sampling distribution after the engine's raw values
# (vLLM computes raw logprobs before penalties, logit bias and min-p), at their neutral
# values. Where one is set, raw values do not describe what was sampled.
_RAW_NEUTRAL: dict[str, Any] = {
    "frequency_penalty": 0, "presence_penalty": 0, "repetition_penalty": 1, "min_p": 0,
    "typical_p": 1, "logit_bias": None, "bad_words": None, "allowed_token_ids": None,
}  # fmt: skip


def raw_describes(params: Mapping[str, Any]) -> bool:
    """Return whether raw values describe a request's sampling once its temperature, top_k
    and top_p are applied: no penalty, logit bias, min-p or token restriction is set."""
    return all(params.get(key) in (None, neutral) or params.get(key) in ({}, [])
               for key, neutral in _RAW_NEUTRAL.items())  # fmt: skip


def exactness_fields(
    logprobs: Mapping[str, Any] | None,
    *,
    temperature: float | None,
    top_p: float | None = None,
    top_k: int | None = None,
    mode: Mode,
    eos: Iterable[str] = EOS,
    top_logprobs: int | None = None,
) -> TokenFit | None:
    """Return a call's exactness statistics from its OpenAI-format `logprobs` object.

    Args:
        logprobs: a choice's `logprobs` (chat: `content` entries with `top_logprobs`;
            completions: `tokens`, `token_logprobs`, `top_logprobs`).
        temperature: the request's temperature (None or 0: greedy, nothing to test).
        top_p: the request's top_p (None: 1).
        top_k: the request's top_k (None, 0 or -1: off).
        mode: "processed" when the values describe the sampling distribution, "raw" when
            they are the model's at temperature 1.
        eos: end-of-sequence spellings to leave out (besides the empty token and any
            token spelled like a special token).
        top_logprobs: how many alternatives the call asked for (chat `top_logprobs`,
            completions `logprobs`); None: each position's list length (pass it for
            vLLM's completions, whose lists are one longer where the sampled token is not
            among the most likely). Only the asked-for number less one most likely are
            read (`trusted`).

    Returns:
        The sums, or None when the call cannot be tested (greedy, or no alternatives).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if temperature is None or temperature <= 0.0 or not isinstance(logprobs, Mapping):
        return None
    sampling = Sampling(float(temperature), 1.0 if top_p is None else float(top_p),
                        top_k if top_k is not None and top_k > 0 else None)  # fmt: skip
    positions = list(_positions(logprobs))
    if not positions or all(not top for _, _, top in positions):
        return None
    stop = Stops(frozenset(eos))
    bins = [0.0] * BINS
    tokens = cut = skipped = off = 0
    off_p = off_p2 = 0.0
    for token, value, top in positions:
        listed = trusted(top, top_logprobs)
        placed = place(listed, token, sampling, mode=mode, eos=stop, logprob=value)
        if placed.cut:
            cut += 1
        elif placed.interval is None:
            skipped += 1
        else:
            tokens += 1
            off += not placed.is_first
            off_p += 1.0 - placed.first_p
            off_p2 += (1.0 - placed.first_p) ** 2
            for b, share in enumerate(occupancy(*placed.interval)):
                bins[b] += share
    return TokenFit(tokens, tuple(bins), cut, skipped, off, off_p, off_p2)


def _positions(logprobs: Mapping[str, Any]) -> Iterable[tuple[str, float, list[tuple[str, float]]]]:
    """Yield (token, logprob, alternatives) per position, from either OpenAI shape."""
    content = logprobs.get("content")
    if isinstance(content, list):
        for entry in content:
            if isinstance(entry, Mapping) and isinstance(entry.get("token"), str):
                alts = entry.get("top_logprobs") or []
                top = [(a["token"], _float(a.get("logprob"))) for a in alts
                       if isinstance(a, Mapping) and isinstance(a.get("token"), str)]  # fmt: skip
                yield entry["token"], _float(entry.get("logprob")), top
        return
    tokens = logprobs.get("tokens") or []
    values = logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or []
    for i, token in enumerate(tokens):
        alts = tops[i] if i < len(tops) and isinstance(tops[i], Mapping) else {}
        value = values[i] if i < len(values) else None
        yield str(token), _float(value), [(str(t), _float(v)) for t, v in alts.items()]


def trusted(top: Sequence[tuple[str, float]], asked: int | None) -> list[tuple[str, float]]:
    """Return the alternatives whose presence does not depend on the emitted token.

    vLLM lists the sampled token first and then the most likely, cut to the number asked
    (chat), or keeps them all (completions: one more where the sampled token is not among
    the most likely): so the list holds the sampled token whatever its rank, and the k-th
    most likely only when the sampled token is among them. Judged as the list stands, a
    draw from below the top k would be placed as a listed token, never in the tail, and
    an exact sampler would be killed. The k - 1 most likely of the list are the k - 1 most
    likely of the distribution under every such engine (and under one that lists the top
    k alone), so only they are read.
    """
    k = len(top) if asked is None else asked
    return sorted(top, key=lambda x: (-x[1], x[0]))[: max(k - 1, 0)]


def _float(value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else -math.inf
