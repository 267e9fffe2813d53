"""The rehearsal's exactness decision on synthetic answers: summing, the verdict, who fails."""

from __future__ import annotations

import numpy as np
import pytest

from gate.exactness_fit import BINS, TokenFit, occupancy
from gate.rehearse.exactness import Answer, Verdict, compare, failed, judge, total

MARGIN, ALPHA = 0.005, 0.025


def fits(shift: float, *, calls: int = 40, tokens: int = 50, seed: int = 1) -> list[TokenFit]:
    """Answers whose tokens' PIT points are uniform, or pushed towards 0 by `shift`."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(calls):
        u = rng.uniform(size=tokens)
        u = np.where(rng.uniform(size=tokens) < shift, u * 0.5, u)  # mass moved to [0, 0.5)
        bins = np.sum([occupancy(x, x) for x in u], axis=0)
        out.append(TokenFit(tokens, tuple(float(b) for b in bins), skipped=1))
    return out


def test_total_sums_tokens_cuts_and_bins_and_skips_untestable_calls() -> None:
    one = TokenFit(2, tuple([2.0] + [0.0] * (BINS - 1)), cut=1)
    two = TokenFit(3, tuple([0.0] * (BINS - 1) + [3.0]))
    summed = total([one, None, two])
    assert (summed.n, summed.cut) == (5, 1)
    assert summed.bins[0] == 2.0 and summed.bins[-1] == 3.0 and sum(summed.bins) == 5.0


def test_an_exact_sampler_passes_with_the_sentence_and_counts() -> None:
    verdict = judge([*fits(0.0), None], margin=MARGIN, alpha=ALPHA, errors=2)
    assert verdict.status == "exact"
    assert verdict.text == "exact: no deviation beyond TV 0.005 over 2000 tokens"
    assert (verdict.answers, verdict.errors, verdict.skipped, verdict.tv) == (41, 2, 40, None)


def test_a_lossy_sampler_is_proven_to_deviate_with_its_tv_interval() -> None:
    verdict = judge(fits(0.3), margin=MARGIN, alpha=ALPHA)
    assert verdict.status == "deviates"
    assert verdict.text.startswith("the candidate's tokens are not distributed as the target's")
    assert verdict.tv is not None
    estimate, lower, upper = verdict.tv
    # Moving 30 % of the points from [0.5, 1) into [0, 0.5) moves 0.15 of the mass.
    assert 0.005 < lower < estimate < upper and estimate == pytest.approx(0.15, abs=0.03)


def test_no_logprobs_is_untestable_never_a_failure() -> None:
    verdict = judge([None, None], margin=MARGIN, alpha=ALPHA)
    assert verdict.status == "untestable" and "no answer carried top_logprobs" in verdict.text
    assert not failed(verdict, judge(fits(0.0), margin=MARGIN, alpha=ALPHA), lossy=False)


def test_the_candidate_fails_only_when_the_control_passes_and_it_is_not_declared_lossy() -> None:
    bad = Verdict("deviates", "x")
    good = Verdict("exact", "y")
    assert failed(bad, good, lossy=False)
    assert not failed(bad, bad, lossy=False)  # the control fails too: a data-quality alarm
    assert not failed(bad, good, lossy=True)
    assert not failed(good, bad, lossy=False)


def test_greedy_parity_counts_identical_answers_and_where_the_others_split() -> None:
    pairs = [
        (Answer(["a", "b", "c"]), Answer(["a", "b", "c"])),
        (Answer(["a", "b", "c"]), Answer(["a", "x", "c"])),
        (Answer(None), Answer(["a"])),
    ]
    parity = compare(pairs)
    assert (parity.compared, parity.identical, parity.errors) == (2, 1, 1)
    assert parity.diverged_at == [1] and parity.mismatch_rate == 0.5
    assert parity.text().startswith("greedy parity: 1 of 2 answers identical")
