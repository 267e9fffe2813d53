"""Per-call exactness statistics from OpenAI-format logprobs (`gate.exactness`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gate.exactness import exactness_fields
from gate.exactness_fit import BINS, TokenFit, occupancy
from gate.exactness_position import Sampling, place


def top(probs: dict[str, float]) -> list[dict[str, object]]:
    return [{"token": t, "logprob": math.log(p)} for t, p in probs.items()]


def chat(entries: list[tuple[str, dict[str, float]]]) -> dict[str, object]:
    return {
        "content": [
            {"token": t, "logprob": math.log(alts.get(t, 1e-9)), "top_logprobs": top(alts)}
            for t, alts in entries
        ]
    }


def test_an_interval_is_spread_over_the_bins_it_covers():
    shares = occupancy(0.0, 0.1)
    assert shares[:2] == pytest.approx([0.5, 0.5]) and sum(shares) == pytest.approx(1.0)
    assert occupancy(0.97, 0.97)[-1] == 1.0  # a point goes to its bin
    assert sum(occupancy(0.33, 0.81)) == pytest.approx(1.0)


def test_the_emitted_token_owns_the_mass_above_it_and_its_own():
    dist = [("a", math.log(0.5)), ("b", math.log(0.3)), ("c", math.log(0.2))]
    got = place(dist, "b", Sampling(1.0), mode="processed")
    assert got.interval == pytest.approx((0.5, 0.8))


def test_end_of_sequence_is_left_out_of_every_position():
    dist = [("a", math.log(0.4)), ("<|im_end|>", math.log(0.5)), ("b", math.log(0.1))]
    got = place(dist, "b", Sampling(1.0), mode="processed")
    # Judged among a and b alone: b owns the last fifth.
    assert got.interval == pytest.approx((0.8, 1.0))
    assert place(dist, "<|im_end|>", Sampling(1.0), mode="processed").interval is None


def test_raw_values_get_the_requests_temperature_and_top_k():
    raw = [("a", math.log(0.6)), ("b", math.log(0.3)), ("c", math.log(0.1))]
    # Weights p ** (1 / T): 0.36, 0.09, 0.01, normalised over the list (no tail is left).
    got = place(raw, "b", Sampling(0.5), mode="raw")
    assert got.interval == pytest.approx((0.36 / 0.46, 0.45 / 0.46))
    assert place(raw, "c", Sampling(1.0, top_k=2), mode="raw").cut


def test_a_top_p_cut_inside_the_list_makes_a_token_beyond_it_impossible():
    raw = [("a", math.log(0.7)), ("b", math.log(0.29)), ("c", math.log(0.01))]
    assert place(raw, "c", Sampling(1.0, top_p=0.9), mode="raw").cut
    kept = place(raw, "b", Sampling(1.0, top_p=0.9), mode="raw")
    assert kept.interval == pytest.approx((0.7 / 0.99, 1.0))


def test_chat_and_completions_shapes_give_the_same_fields():
    steps = [("a", {"a": 0.6, "b": 0.4}), ("b", {"a": 0.2, "b": 0.8})]
    completions = {
        "tokens": [t for t, _ in steps],
        "token_logprobs": [math.log(alts[t]) for t, alts in steps],
        "top_logprobs": [{k: math.log(v) for k, v in alts.items()} for _, alts in steps],
    }
    one = exactness_fields(chat(steps), temperature=1.0, mode="processed")
    two = exactness_fields(completions, temperature=1.0, mode="processed")
    assert one == two and one is not None and one.tokens == 2
    assert sum(one.bins) == pytest.approx(2.0)


def test_greedy_calls_and_calls_without_alternatives_are_not_tested():
    steps = [("a", {"a": 0.6, "b": 0.4})]
    assert exactness_fields(chat(steps), temperature=0.0, mode="raw") is None
    bare = {"content": [{"token": "a", "logprob": -0.5, "top_logprobs": []}]}
    assert exactness_fields(bare, temperature=0.8, mode="raw") is None
    with pytest.raises(ValueError, match="mode"):
        exactness_fields(chat(steps), temperature=0.8, mode="logits")  # type: ignore[arg-type]


def test_stored_fields_read_back_and_malformed_ones_are_refused():
    fit = TokenFit(3, tuple([3 / BINS] * BINS), cut=1, skipped=2, off=1, off_p=0.75, off_p2=0.3)
    assert TokenFit.from_dict(fit.as_dict()) == fit
    with pytest.raises(ValueError):
        TokenFit.from_dict({"n": 1, "bins": [0.0] * 3})
    stored = {"n": 3, "bins": [3 / BINS] * BINS}
    for off, off_p in ((4, 1.0), (-1, 1.0), (1, 3.5), (1, -0.5), (1.5, 1.0), (1, "x")):
        with pytest.raises(ValueError, match="off"):
            TokenFit.from_dict({**stored, "off": off, "off_p": off_p})
    for off_p2 in (0.8, -0.1, "x"):  # each square is at most its chance: at most off_p
        with pytest.raises(ValueError, match="off_p2"):
            TokenFit.from_dict({**stored, "off": 1, "off_p": 0.75, "off_p2": off_p2})
    # Stored before the most-likely test's sums: none, which leaves its capital unmoved.
    legacy = TokenFit.from_dict(stored)
    assert (legacy.off, legacy.off_p, legacy.off_p2) == (0, 0.0, 0.0)


def test_each_token_says_whether_it_was_its_positions_most_likely_and_that_ones_chance():
    # "a" where it leads (0.6), "b" where it leads (0.8), then "a" where "b" leads (0.7).
    steps = [("a", {"a": 0.6, "b": 0.4}), ("b", {"a": 0.2, "b": 0.8}),
             ("a", {"a": 0.3, "b": 0.7})]  # fmt: skip
    fit = exactness_fields(chat(steps), temperature=1.0, mode="processed", top_logprobs=3)
    assert fit is not None and fit.tokens == 3
    assert fit.off == 1  # only the last token was not its position's most likely
    assert fit.off_p == pytest.approx(0.4 + 0.2 + 0.3)  # the chances not to be
    assert fit.as_dict()["off"] == 1 and fit.as_dict()["off_p"] == pytest.approx(0.9)
    assert fit.off_p2 == pytest.approx(0.4**2 + 0.2**2 + 0.3**2)


@pytest.mark.parametrize("mode", ["processed", "raw"])
def test_an_exact_samplers_tokens_fill_the_bins_evenly(mode):
    # The property the test rests on: under exact sampling each bin's expected share is
    # 1 / BINS, whatever the distributions, with temperature and top-p applied.
    rng = np.random.default_rng(3)
    bins, n = np.zeros(BINS), 0
    firsts, chance, spread = 0, 0.0, 0.0
    temperature, top_p = 0.7, 0.95
    for _ in range(6000):
        logits = rng.normal(0.0, 2.0, 40)
        raw = np.exp(logits) / np.exp(logits).sum()
        p = raw ** (1 / temperature)
        p /= p.sum()
        order = np.argsort(-p)
        keep = np.cumsum(p[order]) - p[order] < top_p
        q = np.zeros_like(p)
        q[order[keep]] = p[order[keep]]
        q /= q.sum()
        token = rng.choice(40, p=q)
        shown = q if mode == "processed" else raw
        listed = np.argsort(-shown)[:20]
        alts = [(str(i), math.log(shown[i])) for i in listed if shown[i] > 0]
        got = place(alts, str(token), Sampling(temperature, top_p), mode=mode)
        assert not got.cut
        if got.interval is not None:
            n += 1
            bins += occupancy(*got.interval)
            firsts += got.is_first
            chance += got.first_p
            spread += got.first_p * (1.0 - got.first_p)
    share = bins / n
    # 6,000 tokens: each bin's share within 4 standard errors of 1 / BINS.
    assert np.abs(share - 1 / BINS).max() < 4 * math.sqrt(1 / BINS / n)
    # And the most likely outcome comes up as often as its chances say.
    assert abs(firsts - chance) < 4 * math.sqrt(spread)


def test_a_processed_nucleus_shorter_than_the_list_asked_is_still_tested():
    # top_p cuts the processed lists to the nucleus: one token where it holds p >= top_p.
    steps = [("a", {"a": 1.0}), ("b", {"a": 0.6, "b": 0.4})]
    fit = exactness_fields(chat(steps), temperature=0.8, top_p=0.5, mode="processed",
                           top_logprobs=20)  # fmt: skip
    assert fit is not None and fit.tokens == 2
