"""The speculative verifiers: the exact one keeps the target distribution, biased-argmax not."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy.stats import chisquare  # type: ignore[import-untyped]

from gate.engines.decode import (
    LOGPROB_FLOOR,
    VERIFIERS,
    Sampler,
    TokenLogprobs,
    biased_argmax_verify,
    exact_verify,
    speculate,
    target_probs,
)
from gate.engines.ngram import NgramDrafter

torch = pytest.importorskip("torch")

DRAWS = 20_000
LOGITS = [2.0, 1.2, 0.5, 0.0, -0.5, -1.0]


def frequencies(verify, draft: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the observed token counts of `DRAWS` verifications, and p."""
    probs = target_probs(torch, torch.tensor(LOGITS), 0.8, 1.0)
    gen = torch.Generator().manual_seed(seed)
    counts = Counter(verify(torch, probs, draft, gen)[0] for _ in range(DRAWS))
    observed = np.array([counts.get(t, 0) for t in range(len(LOGITS))], dtype=float)
    return observed, probs.numpy()


@pytest.mark.parametrize("draft", [0, 3])
def test_exact_verifier_emits_the_target_distribution(draft):
    observed, p = frequencies(exact_verify, draft, seed=11)
    assert chisquare(observed, p * DRAWS).pvalue > 0.01


def test_biased_argmax_verifier_emits_the_mode_more_often():
    observed, p = frequencies(biased_argmax_verify, 0, seed=11)
    assert chisquare(observed, p * DRAWS).pvalue < 1e-12
    assert observed[0] == DRAWS  # an argmax draft is always kept
    assert set(VERIFIERS) == {
        "exact",
        "biased-argmax",
        "redraw",
        "accept-t1",
        "ignore-top-p",
        "accept-bf16",
    }


class Toy:
    """A two-step model whose logits depend on the last token only."""

    def __init__(self) -> None:
        self.history: list[int] = []
        # After token 0, token 1 is likely; after anything else, LOGITS (argmax 0).
        self.table = torch.tensor([[0.0, 2.0, 0.5, 1.2, -0.5, -1.0]] + [LOGITS] * 5)

    def forward(self, tokens: list[int]):
        rows = []
        for token in tokens:
            self.history.append(token)
            rows.append(self.table[token])
        return torch.stack(rows)

    def truncate(self, keep: int) -> None:
        del self.history[keep:]


def second_tokens(verify: str, seed: int) -> np.ndarray:
    """Return how often each token came second, with a draft proposed from the prompt."""
    gen = torch.Generator().manual_seed(seed)
    counts = np.zeros(len(LOGITS))
    for _ in range(4000):
        toy, recorder = Toy(), TokenLogprobs(torch)
        # After a sampled "1" the drafter proposes "0, 1" (what followed the prompt's "1").
        prompt = [1, 0, 1, 0]
        steps = speculate(
            toy.forward,
            toy.truncate,
            prompt,
            sampler=Sampler(torch, 0.8, 1.0, gen, verify),
            max_tokens=8,
            drafter=NgramDrafter(prompt, n_min=1, n_max=1),
            k=2,
            logprobs=recorder,
        )
        out: list[int] = []
        for produced in steps:
            out.extend(produced)
            if len(out) >= 2:
                break
        steps.close()
        assert len(recorder.entries or []) >= 2
        counts[out[1]] += 1 if out[0] == 1 else 0
    return counts


def test_the_decode_loop_keeps_the_plain_distribution_only_with_the_exact_verifier():
    # After a first token 1 the drafter proposes 0, the argmax of the row that follows 1.
    p = target_probs(torch, Toy().table[1], 0.8, 1.0).numpy()
    exact = second_tokens("exact", seed=5)
    assert chisquare(exact, p * exact.sum()).pvalue > 0.01
    biased = second_tokens("biased-argmax", seed=5)
    assert chisquare(biased, p * biased.sum()).pvalue < 1e-6


def test_processed_logprobs_are_the_sampling_distribution_of_the_row():
    row = torch.tensor(LOGITS)
    raw, processed = TokenLogprobs(torch, 3), TokenLogprobs(torch, 6, mode="processed")
    processed.temperature, processed.top_p = 0.8, 0.9
    raw.record(row, 2)
    processed.record(row, 2)
    assert raw.entries is not None and processed.entries is not None
    assert raw.entries[0][1] == pytest.approx(float(torch.log_softmax(row.double(), -1)[2]))
    kept = target_probs(torch, row, 0.8, 0.9)
    token, logprob, best = processed.entries[0]
    assert token == 2 and logprob == pytest.approx(float(torch.log(kept[2])))
    # Only the tokens top_p keeps are listed, however many were asked for.
    assert [t for t, _ in best] == [t for t in range(len(LOGITS)) if kept[t] > 0]
    assert sum(np.exp(lp) for _, lp in best) == pytest.approx(1.0)
    # Inside the nucleus the ratios are those of softmax(logits / T).
    tempered = torch.log_softmax(row.double() / 0.8, -1)
    assert best[0][1] - best[1][1] == pytest.approx(float(tempered[0] - tempered[1]))


def test_a_token_the_distribution_cuts_gets_the_floor_not_minus_infinity():
    processed = TokenLogprobs(torch, 2, mode="processed", temperature=0.8, top_p=0.5)
    processed.record(torch.tensor(LOGITS), 5)
    assert processed.entries is not None
    assert processed.entries[0][1] == LOGPROB_FLOOR == -9999.0
    # Greedy requests report the logits at temperature 1 (vLLM's greedy path).
    greedy = TokenLogprobs(torch, 2, mode="processed", temperature=0.0, top_p=0.5)
    greedy.record(torch.tensor(LOGITS), 5)
    assert greedy.entries is not None
    assert greedy.entries[0][1] == pytest.approx(
        float(torch.log_softmax(torch.tensor(LOGITS).double(), -1)[5])
    )
