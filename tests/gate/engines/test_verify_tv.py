"""Each verifier's closed-form output distribution against Monte Carlo of the verifier itself."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from gate.engines.decode import VERIFIERS, Position, target_probs
from gate.engines.verify_tv import emitted_distribution, token_tv

torch = pytest.importorskip("torch")

DRAWS = 20_000
# Drafts: the argmax (0), likely ones (1, 2), one that top_p 0.9 cuts (5).
LOGITS = torch.tensor([2.0, 1.2, 0.5, 0.0, -0.5, -1.0, -1.7, 0.3], dtype=torch.float32)
CASES = [(0.8, 1.0, 0), (0.8, 0.9, 2), (0.8, 0.9, 5), (1.3, 0.95, 1)]


def position(temperature: float, top_p: float, logits=LOGITS) -> Position:
    return Position(logits, temperature, top_p, target_probs(torch, logits, temperature, top_p))


def monte_carlo(verifier: str, at: Position, draft: int, seed: int) -> np.ndarray:
    """Return the frequencies of the tokens the real verifier function emits."""
    gen = torch.Generator().manual_seed(seed)
    verify = VERIFIERS[verifier]
    counts = np.zeros(len(at.logits))
    for _ in range(DRAWS):
        counts[verify(torch, at, draft, gen)[0]] += 1
    return counts / DRAWS


@pytest.mark.parametrize(("temperature", "top_p", "draft"), CASES)
def test_the_exact_verifier_emits_the_target_distribution(temperature, top_p, draft):
    at = position(temperature, top_p)
    assert token_tv(torch, "exact", at, draft) == 0.0
    emitted = emitted_distribution(torch, "exact", at, draft)
    assert torch.equal(emitted, at.probs)


@pytest.mark.parametrize("verifier", sorted(VERIFIERS))
@pytest.mark.parametrize(("temperature", "top_p", "draft"), CASES)
def test_closed_form_matches_the_verifier_it_describes(verifier, temperature, top_p, draft):
    at = position(temperature, top_p)
    expected = emitted_distribution(torch, verifier, at, draft).numpy()
    assert expected.sum() == pytest.approx(1.0, abs=1e-12) and (expected >= 0).all()
    observed = monte_carlo(verifier, at, draft, seed=zlib.crc32(f"{verifier}{draft}".encode()))
    # 5 standard errors of a frequency from DRAWS draws, per token (a 1e-6 false alarm each).
    tolerance = 5 * np.sqrt(expected * (1 - expected) / DRAWS) + 1e-9
    assert (np.abs(observed - expected) <= tolerance).all(), (observed, expected)


def test_each_lossy_verifier_is_at_the_distance_its_bug_predicts():
    at, likely = position(0.8, 1.0), 2
    p = float(at.probs[likely])
    assert token_tv(torch, "redraw", at, likely) == pytest.approx(p * (1 - p))
    p1 = float(target_probs(torch, LOGITS, 1.0, 1.0)[likely])
    assert token_tv(torch, "accept-t1", at, likely) == pytest.approx(abs(p1 - p))
    assert token_tv(torch, "biased-argmax", at, 0) == pytest.approx(1 - float(at.probs[0]))
    assert token_tv(torch, "biased-argmax", at, likely) == 0.0  # not the argmax: samples p
    assert token_tv(torch, "ignore-top-p", at, likely) == 0.0  # nothing to ignore at top_p 1
    cut = position(0.8, 0.9)
    assert token_tv(torch, "ignore-top-p", cut, likely) == pytest.approx(
        float(at.probs[cut.probs == 0].sum())  # the mass top_p cuts, emitted anyway
    )
    assert 0.0 < token_tv(torch, "accept-bf16", position(0.8, 1.0, LOGITS + 3.3), 1) < 0.01


def test_a_point_mass_target_keeps_the_draft_whatever_the_acceptance():
    # top_p this small keeps the argmax alone; accept-t1's own distribution is wider.
    at = position(0.8, 1e-6)
    assert float(at.probs[0]) == 1.0
    assert token_tv(torch, "ignore-top-p", at, 0) > 0.4  # it samples what top_p cut
    for verifier in set(VERIFIERS) - {"ignore-top-p"}:
        assert VERIFIERS[verifier](torch, at, 0, torch.Generator().manual_seed(1))[0] == 0
        assert token_tv(torch, verifier, at, 0) == pytest.approx(0.0)


def test_an_unknown_verifier_is_refused():
    with pytest.raises(ValueError, match="unknown verifier"):
        emitted_distribution(torch, "argmax", position(0.8, 1.0), 0)
