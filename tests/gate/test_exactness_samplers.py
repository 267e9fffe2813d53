"""The exactness fields of `gate.exactness` are unbiased under an exact sampler: for every
position the expected bin shares, over the emitted token, are uniform, whatever the engine
lists (its top alternatives, or vLLM's: the sampled token first, then the most likely)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from gate.exactness import exactness_fields
from gate.exactness_fit import BINS
from gate.exactness_position import Mode

# Two end tokens (as Llama 3 has), the likelier last.
VOCAB = [f"t{i}" for i in range(38)] + ["</s>", "<|im_end|>"]
# (temperature, top_p, top_k) of the requests
SETTINGS = [(0.8, 1.0, None), (0.7, 0.9, None), (1.0, 0.8, 5), (0.6, 1.0, 6), (1.3, 0.95, None)]
Lister = Callable[[dict[str, float], str, int], list[tuple[str, float]]]


def sampling_distribution(
    raw: dict[str, float], t: float, top_p: float, top_k: int | None
) -> dict[str, float]:
    """What an exact sampler draws from: temperature, then top-k, then top-p (vLLM's order)."""
    tempered = {tok: p ** (1.0 / t) for tok, p in raw.items()}
    ranked = sorted(tempered.items(), key=lambda x: (-x[1], x[0]))
    if top_k is not None:
        ranked = ranked[:top_k]
    total = sum(w for _, w in ranked)
    kept, above = {}, 0.0
    for tok, w in ranked:
        if above >= top_p * total:  # kept while the mass above it is below top_p
            break
        kept[tok] = w
        above += w
    norm = sum(kept.values())
    return {tok: kept.get(tok, 0.0) / norm for tok in raw}


def top_only(values: dict[str, float], sampled: str, k: int) -> list[tuple[str, float]]:
    """An engine that lists exactly the k most likely tokens."""
    return sorted(values.items(), key=lambda x: (-x[1], x[0]))[:k]


def vllm_chat(values: dict[str, float], sampled: str, k: int) -> list[tuple[str, float]]:
    """vLLM's chat `top_logprobs`: the first k of {sampled, top 1..k} (the sampled first)."""
    merged = {sampled: values[sampled]}
    for tok, v in top_only(values, sampled, k):
        merged.setdefault(tok, v)
    return list(merged.items())[:k]


def vllm_columns(values: dict[str, float], sampled: str, k: int) -> list[tuple[str, float]]:
    """vLLM's completions `top_logprobs`: {sampled, top 1..k}, k or k + 1 entries."""
    merged = {sampled: values[sampled]}
    for tok, v in top_only(values, sampled, k):
        merged.setdefault(tok, v)
    return list(merged.items())


def logprob(p: float) -> float:
    return math.log(p) if p > 0.0 else -9999.0


def expected_shares(
    raw: dict[str, float],
    setting: tuple,
    mode: Mode,
    lister: Lister,
    k: int,
    shape: str,
    spell: Callable[[str], str] = str,
) -> tuple[np.ndarray, float, float]:
    """Return the expected bin shares, the chance a token is tested and the chance it is
    cut, over the exact sampler's draw at one position."""
    t, top_p, top_k = setting
    q = sampling_distribution(raw, t, top_p, top_k)
    reported = q if mode == "processed" else raw
    values = {tok: logprob(p) for tok, p in reported.items()}
    shares, tested, cut = np.zeros(BINS), 0.0, 0.0
    for sampled, chance in q.items():
        if chance <= 0.0:
            continue
        top = lister(values, sampled, k)
        if shape == "chat":
            alts = [{"token": spell(tok), "logprob": v} for tok, v in top]
            entry = {"token": spell(sampled), "logprob": values[sampled], "top_logprobs": alts}
            logprobs: dict = {"content": [entry]}
        else:
            logprobs = {
                "tokens": [sampled],
                "token_logprobs": [values[sampled]],
                "top_logprobs": [dict(top)],
            }
        # The number asked is needed where the list's length varies (vLLM's columns).
        asked = {"top_logprobs": k} if shape == "columns" else {}
        fit = exactness_fields(
            logprobs, temperature=t, top_p=top_p, top_k=top_k, mode=mode, **asked
        )
        assert fit is not None
        shares += chance * np.asarray(fit.bins)
        tested += chance * fit.tokens
        cut += chance * fit.cut
    return shares, tested, cut


def distributions(count: int, seed: int = 7) -> list[dict[str, float]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        logits = rng.normal(0.0, rng.uniform(0.5, 3.0), size=len(VOCAB))
        if i % 2:  # the end token likely, among the listed; elsewhere anywhere
            logits[-1] = logits.max() - rng.uniform(0.0, 1.0)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        out.append(dict(zip(VOCAB, p.tolist(), strict=True)))
    return out


@pytest.mark.parametrize("mode", ["processed", "raw"])
@pytest.mark.parametrize(
    ("lister", "shape"), [(top_only, "chat"), (vllm_chat, "chat"), (vllm_columns, "columns")]
)
def test_an_exact_sampler_fills_every_bin_evenly(mode: Mode, lister: Lister, shape: str) -> None:
    for raw in distributions(12):
        for setting in SETTINGS:
            shares, tested, cut = expected_shares(raw, setting, mode, lister, 8, shape)
            assert cut == pytest.approx(0.0, abs=1e-12)
            even = np.full(BINS, tested / BINS)
            assert shares == pytest.approx(even, abs=1e-9), setting


def test_a_draw_outside_a_fully_listed_nucleus_is_cut_with_float32_values() -> None:
    # vLLM's processed logprobs are float32: a nucleus listed whole sums to 1 only to ~1e-7.
    nucleus = np.asarray([0.5, 0.3, 0.15, 0.05])
    values = np.log(nucleus).astype(np.float32).tolist()
    alts = [{"token": f"t{i}", "logprob": v} for i, v in enumerate(values)]
    alts += [{"token": f"u{i}", "logprob": -9999.0} for i in range(4)]  # cut by top_p
    drawn = {"token": "x", "logprob": -7.0, "top_logprobs": alts}  # unlisted: outside
    fit = exactness_fields(
        {"content": [drawn]}, temperature=0.8, top_p=0.9, mode="processed", top_logprobs=8
    )
    assert fit is not None and (fit.cut, fit.tokens) == (1, 0)


def byte_piece(token: str) -> str:
    """Tokens 30-35 are pieces of a character: each reads as U+FFFD alone."""
    return "\ufffd" if token in {f"t{i}" for i in range(30, 36)} else token


@pytest.mark.parametrize("mode", ["processed", "raw"])
@pytest.mark.parametrize("lister", [top_only, vllm_chat])
def test_tokens_spelled_alike_keep_the_fields_unbiased(mode: Mode, lister: Lister) -> None:
    for raw in distributions(12, seed=11):
        for setting in SETTINGS:
            shares, tested, cut = expected_shares(raw, setting, mode, lister, 8, "chat", byte_piece)
            assert cut == pytest.approx(0.0, abs=1e-12)
            even = np.full(BINS, tested / BINS)
            assert shares == pytest.approx(even, abs=1e-9), setting
