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

Verify steps that draft nothing: an n-gram drafter proposes nothing when the context holds
no match (and llama.cpp's never, when k is below its lookup n: see
`gate.engines.local.check_llamacpp_lookup`). The per-position counters count only steps
that drafted; when the exposition also carries the generated tokens, all verify steps are
`generated - accepted` (each step emits its accepted drafts plus one target token) and the
share `p` of them that drafted prices the empty ones as plain decode steps:

    speedup(k) = (1 + p * E[A_k]) / (1 + p * k * (cost_ratio + verify_cost)),

taking `p` as measured for every k (the lookup n, not k, decides whether a match exists).
The numerator is the acceptance length (tokens per verify step), the statistic that
compares across k; the acceptance rate E[A_k] / k falls with k by construction, so
ranking k by it picks too short a draft.
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
    steps: int | None = None  # all verify steps, drafting or not, when the counters say

    @property
    def draft_share(self) -> float:
        """Return the share of verify steps that drafted (1 when the steps are unknown)."""
        if self.steps is None or self.steps <= 0:
            return 1.0
        return min(1.0, self.drafts / self.steps)


@dataclass(frozen=True)
class StepEstimate:
    """One candidate `num_speculative_tokens` and what it buys."""

    k: int
    expected_accepted: float  # per verify step that drafted
    tokens_per_step: float  # the acceptance length, over every verify step
    speedup: float
    extrapolated: bool

    @property
    def acceptance_rate(self) -> float:
        """Return accepted over drafted tokens: shown, never ranked on (it falls with k)."""
        return self.expected_accepted / self.k


@dataclass(frozen=True)
class Advice:
    """The recommended k (0: do not speculate) with every option considered."""

    recommended_k: int
    speedup: float
    options: tuple[StepEstimate, ...]
    summary: str
    draft_share: float = 1.0


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
        The k with the highest modelled speedup, or 0 when none beats plain decoding; the
        steps that drafted nothing are priced when `stats.steps` is known.
    """
    curve, measured = survival(stats, max_k)
    expected = np.cumsum(curve)
    ks = np.arange(1, max_k + 1)
    share = stats.draft_share
    length = 1.0 + share * expected
    speedup = length / (1.0 + share * ks * (cost_ratio + verify_cost))
    options = tuple(
        StepEstimate(int(k), float(e), float(n), float(s), bool(k > measured))
        for k, e, n, s in zip(ks, expected, length, speedup, strict=True)
    )
    best = max(options, key=lambda o: o.speedup)
    if best.speedup <= 1.0:
        summary = (
            f"do not speculate: the best k={best.k} gives {best.speedup:.2f}x at draft cost "
            f"ratio {cost_ratio:g}"
        )
        return Advice(0, 1.0, options, summary, share)
    note = f" (extrapolated beyond the measured k={measured})" if best.extrapolated else ""
    empty = f"; {1 - share:.0%} of verify steps drafted nothing" if share < 1 else ""
    summary = (
        f"num_speculative_tokens={best.k}: {best.expected_accepted:.2f} accepted tokens per "
        f"step, {best.speedup:.2f}x modelled speedup at draft cost ratio {cost_ratio:g}"
        f"{note}{empty}"
    )
    return Advice(best.k, best.speedup, options, summary, share)


def propose(advice: Advice, *, current_k: int, count: int = 3) -> tuple[StepEstimate, ...]:
    """Return up to `count` draft lengths worth adding as arms, best first.

    Args:
        advice: the priced options.
        current_k: the draft length the counters were measured at (already running).
        count: how many to propose.

    Returns:
        The options other than `current_k` that beat plain decoding, ranked by modelled
        speedup (the acceptance length over the step's cost; the smaller k on a tie),
        never by acceptance rate.
    """
    paying = [o for o in advice.options if o.speedup > 1.0 and o.k != current_k]
    return tuple(sorted(paying, key=lambda o: (-o.speedup, o.k))[:count])


def rate_pick(advice: Advice) -> int:
    """Return the k that ranking by acceptance rate would pick (the trap, for the record)."""
    return max(advice.options, key=lambda o: (o.acceptance_rate, -o.k)).k
