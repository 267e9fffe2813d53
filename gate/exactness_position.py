"""One position's outcome: the emitted token's interval under the request's sampling.

What makes an interval exact (a token whose interval is not known is left out by a rule
that reads the position's reported distribution only, never the emitted token, so
leaving it out cannot bias the test):
* `mode="processed"`: the log-probabilities already describe the sampling distribution
  (vLLM `--logprobs-mode processed_logprobs`, `specgate engine --logprobs-mode
  processed`). The mass outside the top-k list is known (1 minus the list's): where it
  is nil, a token below the list is cut. Otherwise a draw below the list is not tested:
  the end tokens' share of it is unknown (see End of sequence).
* `mode="raw"`: they describe the model at temperature 1 (vLLM's default). Temperature,
  top-k and top-p are applied here. A request top_k within the list, or a top-p cut that
  falls inside the list whatever the tail holds, makes the distribution exact. Otherwise
  the unlisted tokens' share after temperature is not known, but the listed tokens'
  shares relative to each other are: the position is then judged as a draw among the
  listed tokens (conditioning on outcomes fixed before the draw keeps the test exact; a
  draw outside them has factor 1 and counts in `skipped`).
* End of sequence: engines do not report the token that ends an answer, so each position
  is judged as a draw from its distribution without the end-of-sequence token:
  conditioning on "not the end" keeps the test exact (a stop's factor is 1). Leaving out
  any set of tokens named before the draw keeps it exact too (it only costs power), so
  the set is generous: the spellings in `EOS` (or the caller's), the empty token, and
  every token spelled like a special token (`<|...|>`, `<...>`, `</...>`, `[EOS]`).
* A token the request's settings cut (outside top-k or top-p) is impossible for an exact
  sampler: it is counted in `cut`, tested on its own.

Which alternatives a position lists, and which calls raw values describe, are read before
this (`gate.exactness`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Literal

Mode = Literal["raw", "processed"]
MODES: tuple[Mode, ...] = ("raw", "processed")
# End-of-sequence spellings of common chat models' tokenizers, as engines report them
# (DeepSeek's with full-width bars). Judging positions without more spellings than a model
# has stays exact (a draw of one has factor 1); missing one of its spellings does not.
EOS = frozenset(
    {
        "<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<|end_of_text|>", "<eos>",
        "<end_of_turn>", "<|end|>", "<|return|>", "<|eom_id|>", "<|call|>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>", "<|END_OF_TURN_TOKEN|>",
    }
)  # fmt: skip
# Spelled like a special token: `<|im_end|>`, `<eos>`, `</s>`, `[EOS]` (no spaces inside).
_SPECIAL = re.compile(r"<\|[^\s|]*\|>|</?[A-Za-z_][\w.-]*>|\[[A-Z][A-Z_]*\]")
# A log-probability at or below this is a token the engine cut (some write -9999).
_CUT_LOGPROB = -1e4
# Unlisted mass at or below this is nil: engines report float32 values, so a list that
# holds every possible token sums to 1 only to ~1e-7. Reading up to this much as nil adds
# at most it to the cut rate of an exact sampler, far below any `margin_tv`.
_NIL = 1e-5


@dataclass(frozen=True)
class Sampling:
    """The request's sampling settings the engine applied."""

    temperature: float
    top_p: float = 1.0
    top_k: int | None = None

    @property
    def greedy(self) -> bool:
        """Return whether the request decodes greedily (no distribution to test)."""
        return self.temperature <= 0.0


@dataclass(frozen=True)
class Placement:
    """A position's outcome: the emitted token's interval, or why it was not placed."""

    interval: tuple[float, float] | None = None
    cut: bool = False
    # The probability of the position's most likely known outcome (the first in the
    # order), and whether the emitted token is it.
    first_p: float = 0.0
    is_first: bool = False


_SKIP = Placement()
_CUT = Placement(cut=True)


def place(
    top: Sequence[tuple[str, float]],
    token: str,
    sampling: Sampling,
    *,
    mode: Mode,
    eos: Container[str] | None = None,
    logprob: float = -math.inf,
) -> Placement:
    """Return the emitted token's interval at one position (or cut, or not placed)."""
    eos = Stops(EOS) if eos is None else eos
    if token in eos or not top:
        return _SKIP  # an end token's factor is 1; no alternatives: no distribution
    if mode == "raw" and len({t for t, _ in top}) < len(top):
        # Temperature, top-k and top-p act on tokens, not spellings: tokens listed alike
        # cannot be told apart, so the position is not tested (the list alone says so).
        return _SKIP
    weights = _merged(top)
    known = _processed(weights) if mode == "processed" else _raw(weights, sampling)
    kept = {t: w for t, w in known.kept.items() if t not in eos}
    listed = _listed(top, token, logprob)
    if (listed and token in known.cut) or (not listed and known.tail_cut):
        return _CUT
    total = sum(kept.values()) + (known.tail or 0.0)
    if total <= 0.0:
        return _SKIP
    # Most likely first, ties by spelling: the order needs only the distribution.
    ranked = sorted(kept.items(), key=lambda x: (-x[1], x[0]))
    leader = ranked[0][0] if ranked else None
    first_p = ranked[0][1] / total if ranked else 0.0
    if not listed:  # below the list: the tail, when its share is known
        tail = known.tail
        return Placement((1.0 - tail / total, 1.0), first_p=first_p) if tail else _SKIP
    if token not in kept:
        return _SKIP  # its share relative to the known outcomes is not known
    own = kept[token]
    above = sum(w for t, w in kept.items() if (-w, t) < (-own, token))
    is_first = leader == token
    return Placement((above / total, (above + own) / total), first_p=first_p, is_first=is_first)


def _listed(top: Sequence[tuple[str, float]], token: str, logprob: float) -> bool:
    """Return whether the emitted token is a listed one: its spelling, and its value.

    Distinct tokens can read alike (pieces of one character each read U+FFFD): one below
    the list spelled as a listed one is told apart by its own log-probability, which the
    engine reports from the same values as the list's (unknown: by spelling alone).
    """
    alike = [v for t, v in top if t == token]
    if not alike or not math.isfinite(logprob):
        return bool(alike)
    return any(math.isclose(v, logprob, rel_tol=1e-6, abs_tol=1e-9) for v in alike)


@dataclass(frozen=True)
class _Known:
    """A position's outcomes whose probabilities are known relative to each other.

    `kept` listed tokens and their weights; `tail` the weight of every unlisted token
    together, when known (None: unknown, and a tail token is not tested); `cut` listed
    tokens the settings surely cut; `tail_cut` whether they surely cut every unlisted one.
    Conditioning on the known outcomes keeps the test exact: a draw outside them has
    factor 1, and within them the draw follows the known relative weights.
    """

    kept: dict[str, float]
    tail: float | None
    cut: frozenset[str] = frozenset()
    tail_cut: bool = False


@dataclass(frozen=True)
class Stops:
    """The tokens a position is judged without: named spellings, and special-looking ones."""

    named: frozenset[str]

    def __contains__(self, token: object) -> bool:
        if not isinstance(token, str):
            return False
        return token in self.named or not token or _SPECIAL.fullmatch(token) is not None


def _merged(top: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Return each spelling's probability (tokens spelled alike are one outcome: exact
    where the values are the sampling distribution, processed mode)."""
    out: dict[str, float] = {}
    for token, logprob in top:
        p = math.exp(logprob) if logprob > _CUT_LOGPROB else 0.0
        out[token] = out.get(token, 0.0) + p
    return out


def _processed(weights: dict[str, float]) -> _Known:
    """Return the known outcomes when the values are the sampling distribution itself."""
    listed = sum(weights.values())
    kept = {t: w / max(listed, 1.0) for t, w in weights.items() if w > 0.0}
    cut = frozenset(t for t, w in weights.items() if w <= 0.0)
    tail = max(0.0, 1.0 - listed)
    if tail <= _NIL:
        return _Known(kept, 0.0, cut, tail_cut=True)
    # Positions are judged without the end tokens; any of them unlisted (a model may have
    # several) hides in the tail with an unknown share, so a draw from it is not tested.
    return _Known(kept, None, cut)


def _raw(weights: dict[str, float], sampling: Sampling) -> _Known:
    """Return the known outcomes after the request's temperature, top-k and top-p."""
    ranked = sorted(((w, t) for t, w in weights.items() if w > 0.0), key=lambda x: (-x[0], x[1]))
    inv = 1.0 / sampling.temperature
    scaled = [(t, w**inv) for w, t in ranked]
    rest = max(0.0, 1.0 - sum(w for w, _ in ranked))
    cut = {t for t, w in weights.items() if w <= 0.0}
    k = sampling.top_k
    if k is not None and k <= len(scaled):
        cut |= {t for t, _ in scaled[k:]}
        return _top_p(dict(scaled[:k]), 0.0, cut, True, sampling.top_p)
    # Each unlisted token is below the list's last, so the tail's tempered weight is at
    # most `rest` times that token's probability to the power 1/T - 1 (T <= 1); above
    # temperature 1 a long tail can weigh anything.
    if rest <= _NIL:
        tail_hi = 0.0
    elif inv >= 1.0 and ranked:
        tail_hi = rest * ranked[-1][0] ** (inv - 1.0)
    else:
        tail_hi = math.inf
    return _top_p(dict(scaled), tail_hi, cut, rest <= _NIL, sampling.top_p)


def _top_p(
    kept: dict[str, float], tail_hi: float, cut: set[str], tail_cut: bool, top_p: float
) -> _Known:
    """Apply top-p to tempered weights whose unlisted tail weighs between 0 and `tail_hi`."""
    tail = 0.0 if tail_cut or tail_hi == 0.0 else None
    if top_p >= 1.0 or not kept:
        return _Known(kept, tail, frozenset(cut), tail_cut)
    listed = sum(kept.values())
    ranked = sorted(kept.items(), key=lambda x: (-x[1], x[0]))
    # A heavier tail moves the cut later: the lightest tail keeps the fewest tokens.
    fewest = _cut_at(ranked, listed, top_p)
    most = None if tail_cut else _cut_at(ranked, listed + tail_hi, top_p)
    if tail_cut:
        most = fewest
    sure = ranked if fewest is None else ranked[:fewest]
    if most is not None:  # the cut falls inside the list whatever the tail holds
        cut |= {t for t, _ in ranked[most:]}
        return _Known(dict(sure), 0.0, frozenset(cut), True)
    return _Known(dict(sure), None, frozenset(cut), False)


def _cut_at(ranked: list[tuple[str, float]], total: float, top_p: float) -> int | None:
    """Return how many listed tokens top-p keeps, or None when its cut is in the tail."""
    if not math.isfinite(total):
        return None
    mass = 0.0
    for i, (_, w) in enumerate(ranked):
        if mass >= top_p * total:
            return i
        mass += w
    return None if mass < top_p * total else len(ranked)
