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
most-likely test's sums). Under the null each
token's shares have expectation 1 / `BINS` per bin whatever came before, so the sums are
what a test martingale needs (`gate.stats.exactness`); only these sums are stored, never
the arrays.

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
import re
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

BINS = 20
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
class TokenFit:
    """One call's exactness statistics: sums over its tested tokens.

    `tokens` tested tokens, `bins` their fractional shares of each bin of [0, 1] (summing
    to `tokens`), `cut` tokens the settings make impossible, `skipped` positions whose
    distribution was not known well enough to test (and end-of-sequence tokens).
    """

    tokens: int
    bins: tuple[float, ...]
    cut: int = 0
    skipped: int = 0
    # Of the tested tokens, how many were NOT their position's most likely outcome (the
    # first of the order), and the sum of each one's chance not to be (its expectation
    # under an exact sampler): the most-likely test's sums (`gate.stats.exactness`).
    # Absent (stored before them): 0 and 0, which leaves that test's capital as it was.
    off: int = 0
    off_p: float = 0.0
    # The sum of the squares of those chances: the most-likely test's variance term (a
    # Bernoulli's q (1 - q) rather than a Poisson's q). Absent: 0, the Poisson bound.
    off_p2: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Return the stored fields (`generations.exactness`, the replay side's `exactness`)."""
        return {
            "n": self.tokens,
            "cut": self.cut,
            "skipped": self.skipped,
            "bins": [round(b, 9) for b in self.bins],
            "off": self.off,
            "off_p": round(self.off_p, 9),
            "off_p2": round(self.off_p2, 9),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TokenFit:
        """Return the statistics from their stored fields; ValueError when malformed:
        counts that are not whole and nonnegative, bins that are not `BINS` finite
        nonnegative shares summing to the tested tokens (what the test's bound needs)."""
        bins = raw.get("bins")
        if not isinstance(bins, list) or len(bins) != BINS:
            raise ValueError(f"exactness.bins must be a list of {BINS} numbers")
        counts = [raw.get("n"), raw.get("cut", 0), raw.get("skipped", 0)]
        if not all(type(c) is int and c >= 0 for c in counts):
            raise ValueError("exactness n, cut and skipped must be whole numbers >= 0")
        shares = tuple(_share(b) for b in bins)
        if abs(sum(shares) - counts[0]) > _SLACK * max(1, counts[0]):
            raise ValueError("exactness.bins must sum to n")
        off, off_p = raw.get("off", 0), raw.get("off_p", 0)
        if type(off) is not int or not 0 <= off <= counts[0]:
            raise ValueError("exactness.off must be a whole number from 0 to n")
        try:
            off_p = _share(off_p)
        except ValueError:
            raise ValueError("exactness.off_p must be a number from 0 to n") from None
        if off_p > counts[0] + _SLACK * max(1, counts[0]):
            raise ValueError("exactness.off_p must be a number from 0 to n")
        off_p = min(off_p, float(counts[0]))
        try:
            off_p2 = _share(raw.get("off_p2", 0))
        except ValueError:
            raise ValueError("exactness.off_p2 must be a number from 0 to off_p") from None
        if off_p2 > off_p + _SLACK * max(1, counts[0]):  # each square is at most its chance
            raise ValueError("exactness.off_p2 must be a number from 0 to off_p")
        return cls(counts[0], shares, counts[1], counts[2], off, off_p, min(off_p2, off_p))


# Rounding the stored shares (9 decimals) moves them and their sum by less than this.
_SLACK = 1e-6


def _share(value: Any) -> float:
    """Return a stored bin share; ValueError unless a finite number >= 0 (to rounding)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < -_SLACK:
        raise ValueError("exactness.bins must be finite numbers >= 0")
    return max(float(value), 0.0)


@dataclass(frozen=True)
class _Position:
    """A position's outcome: the emitted token's interval, or why it was not placed."""

    interval: tuple[float, float] | None = None
    cut: bool = False
    # The probability of the position's most likely known outcome (the first in the
    # order), and whether the emitted token is it.
    first_p: float = 0.0
    is_first: bool = False


_SKIP = _Position()
_CUT = _Position(cut=True)


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
    stop = _Stops(frozenset(eos))
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


def place(
    top: Sequence[tuple[str, float]],
    token: str,
    sampling: Sampling,
    *,
    mode: Mode,
    eos: Container[str] | None = None,
    logprob: float = -math.inf,
) -> _Position:
    """Return the emitted token's interval at one position (or cut, or not placed)."""
    eos = _Stops(EOS) if eos is None else eos
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
        return _Position((1.0 - tail / total, 1.0), first_p=first_p) if tail else _SKIP
    if token not in kept:
        return _SKIP  # its share relative to the known outcomes is not known
    own = kept[token]
    above = sum(w for t, w in kept.items() if (-w, t) < (-own, token))
    is_first = leader == token
    return _Position((above / total, (above + own) / total), first_p=first_p, is_first=is_first)


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
class _Stops:
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


def occupancy(lo: float, hi: float) -> list[float]:
    """Return the share of the interval [lo, hi] of [0, 1] in each of `BINS` equal bins."""
    lo, hi = max(0.0, min(lo, 1.0)), max(0.0, min(hi, 1.0))
    shares = [0.0] * BINS
    width = hi - lo
    if width <= 1e-15:
        shares[min(int(lo * BINS), BINS - 1)] = 1.0
        return shares
    first, last = int(lo * BINS), min(int(hi * BINS), BINS - 1)
    for b in range(first, last + 1):
        overlap = min(hi, (b + 1) / BINS) - max(lo, b / BINS)
        shares[b] = max(0.0, overlap) / width
    return shares
