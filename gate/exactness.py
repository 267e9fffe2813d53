"""Per-token exactness: what one call's tokens say about its sampler, from `top_logprobs`.

An exact sampler emits each token as a draw from the target's next-token distribution
after the request's temperature, top-k and top-p. Order a position's tokens by
probability; the emitted token then owns the interval [mass above it, mass above it + its
own mass] of [0, 1], and the randomised probability integral transform (a uniform point
of that interval) is Uniform(0, 1) given everything before it. Instead of drawing that
point, a call keeps the expected share of it in each of `BINS` equal bins of [0, 1]: its
fractional bin counts (`TokenFit.bins`), summed over its tokens. Under the null each
token's shares have expectation 1 / `BINS` per bin whatever came before, so the sums are
what a test martingale needs (`gate.stats.exactness`); only these sums are stored, never
the arrays.

What makes an interval exact (a token whose interval is not known is left out by a rule
that reads the position's reported distribution only, never the emitted token, so
leaving it out cannot bias the test):
* `mode="processed"`: the log-probabilities already describe the sampling distribution
  (vLLM `--logprobs-mode processed_logprobs`, `specgate engine --logprobs-mode
  processed`). The mass outside the top-k list is known (1 minus the list's), and
  tokens below the list share one interval, the tail.
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
# End-of-sequence spellings of common chat models' tokenizers, as engines report them.
EOS = frozenset(
    {
        "<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<|end_of_text|>", "<eos>",
        "<end_of_turn>", "<|end|>", "<|return|>", "<|eom_id|>",
    }
)  # fmt: skip
# Spelled like a special token: `<|im_end|>`, `<eos>`, `</s>`, `[EOS]` (no spaces inside).
_SPECIAL = re.compile(r"<\|[^\s|]*\|>|</?[A-Za-z_][\w.-]*>|\[[A-Z][A-Z_]*\]")
# A log-probability at or below this is a token the engine cut (some write -9999).
_CUT_LOGPROB = -1e4


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

    def as_dict(self) -> dict[str, Any]:
        """Return the stored fields (`generations.exactness`, the replay side's `exactness`)."""
        return {
            "n": self.tokens,
            "cut": self.cut,
            "skipped": self.skipped,
            "bins": [round(b, 9) for b in self.bins],
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TokenFit:
        """Return the statistics from their stored fields; ValueError when malformed."""
        bins = raw.get("bins")
        if not isinstance(bins, list) or len(bins) != BINS:
            raise ValueError(f"exactness.bins must be a list of {BINS} numbers")
        return cls(int(raw["n"]), tuple(float(b) for b in bins), int(raw.get("cut", 0)),
                   int(raw.get("skipped", 0)))  # fmt: skip


@dataclass(frozen=True)
class _Position:
    """A position's outcome: the emitted token's interval, or why it was not placed."""

    interval: tuple[float, float] | None = None
    cut: bool = False


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
    tokens = cut = skipped = 0
    for token, _, top in positions:
        placed = place(top, token, sampling, mode=mode, eos=stop)
        if placed.cut:
            cut += 1
        elif placed.interval is None:
            skipped += 1
        else:
            tokens += 1
            for b, share in enumerate(occupancy(*placed.interval)):
                bins[b] += share
    return TokenFit(tokens, tuple(bins), cut, skipped)


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
) -> _Position:
    """Return the emitted token's interval at one position (or cut, or not placed)."""
    eos = _Stops(EOS) if eos is None else eos
    if token in eos or not top:
        return _SKIP  # an end token's factor is 1; no alternatives: no distribution
    weights = _merged(top)
    known = _processed(weights) if mode == "processed" else _raw(weights, sampling)
    kept = {t: w for t, w in known.kept.items() if t not in eos}
    if token in known.cut or (token not in weights and known.tail_cut):
        return _CUT
    total = sum(kept.values()) + (known.tail or 0.0)
    if total <= 0.0:
        return _SKIP
    if token not in weights:  # below the list: the tail, when its share is known
        tail = known.tail
        return _Position((1.0 - tail / total, 1.0)) if tail else _SKIP
    if token not in kept:
        return _SKIP  # its share relative to the known outcomes is not known
    # Most likely first, ties by spelling: the order needs only the distribution.
    own = kept[token]
    above = sum(w for t, w in kept.items() if (-w, t) < (-own, token))
    return _Position((above / total, (above + own) / total))


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
    """Return each spelling's probability (tokens spelled alike are one outcome)."""
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
    return _Known(kept, tail, cut, tail_cut=tail <= 1e-12)


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
    if rest <= 1e-12:
        tail_hi = 0.0
    elif inv >= 1.0 and ranked:
        tail_hi = rest * ranked[-1][0] ** (inv - 1.0)
    else:
        tail_hi = math.inf
    return _top_p(dict(scaled), tail_hi, cut, rest <= 1e-12, sampling.top_p)


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
