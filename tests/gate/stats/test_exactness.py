"""The whole exactness test on simulated samplers: an exact one is killed at most at the
level (at every look), a lossy one is killed. Random next-token distributions with the end
token among them, vLLM's lists (the sampled token first), top_p < 1 and top_k."""

from __future__ import annotations

import numpy as np
import pytest

from gate.exactness import exactness_fields
from gate.exactness_fit import BINS
from gate.exactness_position import Mode
from gate.stats.exactness import TokenBins, harmful, inside
from tests.gate.test_exactness_samplers import VOCAB, logprob, vllm_chat

ALPHA = 0.05
K = 8  # alternatives asked: few, so the tail and the list's end matter
SETTINGS = [(0.8, 0.9, None), (1.0, 0.95, 6), (0.7, 1.0, None), (1.2, 0.85, 10)]


def sampling_rows(raw: np.ndarray, t: float, top_p: float, top_k: int | None) -> np.ndarray:
    """Return each row's sampling distribution: temperature, top-k, then top-p (vLLM's)."""
    tempered = raw ** (1.0 / t)
    order = np.argsort(-tempered, axis=1, kind="stable")
    ranked = np.take_along_axis(tempered, order, axis=1)
    if top_k is not None:
        ranked[:, top_k:] = 0.0
    above = np.cumsum(ranked, axis=1) - ranked
    ranked = np.where(above < top_p * ranked.sum(axis=1, keepdims=True), ranked, 0.0)
    out = np.zeros_like(raw)
    np.put_along_axis(out, order, ranked / ranked.sum(axis=1, keepdims=True), axis=1)
    return out


def call_of(rng: np.random.Generator, mode: Mode, heat: float, setting: tuple) -> dict:
    """Return one answer's `logprobs` (50 tokens, or fewer when the end token is drawn)."""
    t, top_p, top_k = setting
    logits = rng.normal(0.0, 1.0, size=(50, len(VOCAB))) * rng.uniform(0.5, 3.0, (50, 1))
    logits[:, -1] -= 2.0  # the end token: rarely drawn, so answers run to ~40 tokens
    raw = np.exp(logits - logits.max(axis=1, keepdims=True))
    raw /= raw.sum(axis=1, keepdims=True)
    q, drawn = sampling_rows(raw, t, top_p, top_k), sampling_rows(raw, t * heat, top_p, top_k)
    picks = (np.cumsum(drawn, axis=1) < rng.uniform(size=(50, 1))).sum(axis=1)
    reported = q if mode == "processed" else raw
    entries = []
    for row, pick in zip(reported, np.minimum(picks, len(VOCAB) - 1), strict=True):
        values = {tok: logprob(v) for tok, v in zip(VOCAB, row.tolist(), strict=True)}
        top = [{"token": a, "logprob": v} for a, v in vllm_chat(values, VOCAB[pick], K)]
        entries.append({"token": VOCAB[pick], "logprob": values[VOCAB[pick]], "top_logprobs": top})
        if VOCAB[pick] == VOCAB[-1]:
            break  # the end token ends the answer
    return {"content": entries}


def run_bins(
    rng: np.random.Generator, mode: Mode, *, heat: float = 1.0, calls: int = 16
) -> np.ndarray:
    """Return one run's cumulative (n, cut, bins...) after each call; the sampler draws at
    `heat` times the request's temperature (1: exact)."""
    rows, total = [], np.zeros(2 + BINS)
    for call in range(calls):
        setting = SETTINGS[call % len(SETTINGS)]
        t, top_p, top_k = setting
        logprobs = call_of(rng, mode, heat, setting)
        fit = exactness_fields(logprobs, temperature=t, top_p=top_p, top_k=top_k, mode=mode)
        assert fit is not None
        total = total + np.asarray([fit.tokens, fit.cut, *fit.bins])
        rows.append(total)
    return np.asarray(rows)


def stats_of(runs: np.ndarray) -> TokenBins:
    """Return the statistics at every look of every run (axes: runs, looks)."""
    return TokenBins(runs[..., 0], runs[..., 1], tuple(runs[..., 2 + b] for b in range(BINS)))


@pytest.mark.parametrize("mode", ["processed", "raw"])
def test_an_exact_sampler_is_killed_at_most_at_the_level(mode: Mode) -> None:
    rng = np.random.default_rng(36 if mode == "raw" else 63)
    runs = np.stack([run_bins(rng, mode) for _ in range(30)])
    killed = harmful(stats_of(runs), 0.0, ALPHA).any(axis=-1)  # at any look
    assert killed.sum() <= 5  # P(Binomial(30, 0.05) > 5) < 0.02
    pooled = stats_of(runs.sum(axis=0, keepdims=True)[:, -1:])  # ~20k tokens as one run
    assert not harmful(pooled, 0.0, 0.01).any()


@pytest.mark.parametrize("mode", ["processed", "raw"])
def test_a_sampler_hotter_than_asked_is_killed(mode: Mode) -> None:
    rng = np.random.default_rng(7)
    runs = np.stack([run_bins(rng, mode, heat=1.6, calls=50) for _ in range(3)])
    assert harmful(stats_of(runs[:, -1:]), 0.005, ALPHA).all()


def test_promotion_needs_every_set_inside_at_the_whole_level() -> None:
    # Perfectly even bins: every test must pass, so each runs at the promotion level
    # (intersection-union), and 30,000 tokens prove every set within 0.01.
    n = np.asarray([10_000.0, 30_000.0])
    even = TokenBins(n, np.zeros(2), tuple(n / BINS for _ in range(BINS)))
    assert inside(even, 0.01, ALPHA).tolist() == [False, True]
    # One set off by 0.02 (beyond the margin) is never promoted, however many tokens.
    many = np.asarray([30_000.0, 300_000.0])
    off = [many / BINS for _ in range(BINS)]
    off[0], off[1] = off[0] + 0.02 * many, off[1] - 0.02 * many
    assert not inside(TokenBins(many, np.zeros(2), tuple(off)), 0.01, ALPHA).any()
