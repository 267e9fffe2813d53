"""Speculation advisor: how many draft tokens per step pay off.

Input: per-position acceptance from the engine (vLLM's `spec_decode_num_drafts` and
`spec_decode_num_accepted_tokens_per_pos`): of `drafts` verify steps, `accepted[i]` had the
draft token at position i + 1 accepted, which requires positions 1..i accepted too, so
`accepted[i] / drafts` is the probability that the first i + 1 drafted tokens survive.

Expected accepted tokens per verify step with k drafted tokens:
    E[A_k] = sum_{i=1..k} P(first i accepted);
each step also yields one token from the target (the correction or bonus token).

Cost model (stated, not measured): one step costs k draft forward passes at
`cost_ratio` (draft time / target time per forward pass) plus one target pass that
verifies k + 1 tokens; verification is taken as the cost of one ordinary decode step
plus `verify_cost` per extra token (0 when decoding is memory-bound, the usual case at
moderate batch sizes). Without speculation a target pass yields one token, so

    speedup(k) = (1 + E[A_k]) / (1 + k * cost_ratio + k * verify_cost).

Beyond the largest measured position the survival curve is extended geometrically with
the last measured conditional acceptance (P(i+1 | i)); such rows are flagged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gate.stats.sequences import FloatArray


@dataclass(frozen=True)
class PositionAcceptance:
    """Engine counters: verify steps and accepted drafts per position (1-based order)."""

    drafts: int
    accepted: tuple[int, ...]


@dataclass(frozen=True)
class StepEstimate:
    """One candidate `num_speculative_tokens` and what it buys."""

    k: int
    expected_accepted: float
    tokens_per_step: float
    speedup: float
    extrapolated: bool


@dataclass(frozen=True)
class Advice:
    """The recommended k (0: do not speculate) with every option considered."""

    recommended_k: int
    speedup: float
    options: tuple[StepEstimate, ...]
    summary: str


def survival(stats: PositionAcceptance, max_k: int) -> tuple[FloatArray, int]:
    """Return P(first i accepted) for i = 1..max_k, and how many are measured.

    Args:
        stats: engine counters.
        max_k: how many positions to return.

    Returns:
        The survival curve (non-increasing; counts that rise are capped, since a later
        position cannot be accepted more often than an earlier one) and the measured
        length.
    """
    if stats.drafts <= 0 or not stats.accepted:
        return np.zeros(max_k), 0
    measured = np.minimum.accumulate(np.asarray(stats.accepted, dtype=np.float64) / stats.drafts)
    measured = np.clip(measured, 0.0, 1.0)
    if measured.size >= max_k:
        return measured[:max_k], max_k
    previous = measured[-2] if measured.size > 1 else 1.0
    ratio = measured[-1] / previous if previous > 0 else 0.0
    extra = measured[-1] * ratio ** np.arange(1, max_k - measured.size + 1)
    return np.concatenate([measured, extra]), int(measured.size)


def advise(
    stats: PositionAcceptance,
    *,
    cost_ratio: float,
    verify_cost: float = 0.0,
    max_k: int = 8,
) -> Advice:
    """Recommend `num_speculative_tokens` for a draft-to-target cost ratio.

    Args:
        stats: per-position acceptance counters.
        cost_ratio: draft forward-pass time over target forward-pass time.
        verify_cost: extra target cost per verified token, in target steps.
        max_k: the largest k considered.

    Returns:
        The k with the highest modelled speedup, or 0 when none beats plain decoding.
    """
    curve, measured = survival(stats, max_k)
    expected = np.cumsum(curve)
    ks = np.arange(1, max_k + 1)
    speedup = (1.0 + expected) / (1.0 + ks * (cost_ratio + verify_cost))
    options = tuple(
        StepEstimate(int(k), float(e), float(1 + e), float(s), bool(k > measured))
        for k, e, s in zip(ks, expected, speedup, strict=True)
    )
    best = max(options, key=lambda o: o.speedup)
    if best.speedup <= 1.0:
        summary = (
            f"do not speculate: the best k={best.k} gives {best.speedup:.2f}x at draft cost "
            f"ratio {cost_ratio:g}"
        )
        return Advice(0, 1.0, options, summary)
    note = f" (extrapolated beyond the measured k={measured})" if best.extrapolated else ""
    summary = (
        f"num_speculative_tokens={best.k}: {best.expected_accepted:.2f} accepted tokens per "
        f"step, {best.speedup:.2f}x modelled speedup at draft cost ratio {cost_ratio:g}{note}"
    )
    return Advice(best.k, best.speedup, options, summary)
