"""Acceptance length: tokens emitted per verify step, the acceptance statistic comparable across k.

The acceptance rate (accepted / drafted tokens) has the draft budget as its denominator,
so a longer draft lowers it even when it emits more tokens per step: ranking draft
lengths k by rate picks too short a k. The acceptance length L does not: each target
forward pass emits its accepted draft tokens plus one of its own, so a request that
emitted `output` tokens, `accepted` of them drafted, took `output - accepted` passes and

    L = output / (output - accepted),

1 without speculation and at most k + 1. Over requests the length is the ratio of the sums
(tokens per pass over the arm's traffic), not the mean of per-request ratios.

Too high is a harm of its own: L near k + 1 means nearly every draft was taken whole,
which on an n-gram drafter is the signature of a degenerate repetition loop (the answer
copies itself, so its own n-grams predict it). A pair shows the signature (`looping`) when
the candidate's L reaches `LOOP_SHARE` of k + 1 (k = drafted tokens per pass, so a
drafter that proposed nothing on some passes needs a correspondingly longer run of hits)
and its answer's distinct-2 (distinct word bigrams / bigrams) fell below `LOOP_DISTINCT`
of the baseline answer's. The collapse detector (`gate.stats.change`) watches acceptance
falling and misses this; the `loop` guardrail (`gate.stats.registry`) kills on it: the
share of pairs with the signature (`loop_outcome`), a paired rate against the baseline's
answer collapsed against the candidate's (`baseline_collapse`), proven above its kill level.
The baseline drafts nothing, so it never shows the whole signature; but at temperature > 0
a model loops on its own, and a lossless candidate's looping answers are drafted whole, so
counting the candidate's loops alone would kill a candidate no worse than the baseline.
Whenever the two answers are exchangeable (a lossless candidate), P(candidate loops) <=
P(candidate's distinct-2 collapsed) = P(baseline's collapsed): the paired difference has
mean <= 0 and the kill keeps its level.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from gate.stats.sequences import BoolArray, FloatArray

# L at least this share of k + 1: nearly every pass took its whole draft.
LOOP_SHARE = 0.9
# Candidate distinct-2 below this share of the baseline's: the answer repeats itself.
LOOP_DISTINCT = 0.5


@dataclass(frozen=True)
class AcceptanceLength:
    """Tokens emitted per verify step over a set of requests, and the loop signatures."""

    length: float | None  # None: no request with token counts
    requests: int
    looping: int  # pairs with the repetition-loop signature
    compared: int  # pairs where the signature could be read (both distinct-2 known)


@dataclass(frozen=True)
class AcceptanceSums:
    """What a set of requests' acceptance length is summed from; additive, so the Postgres
    fold keeps it per arm (`gate.verdicts.acceptance`)."""

    output: float = 0.0  # tokens emitted by the requests whose passes are known
    passes: float = 0.0  # their target forward passes
    requests: int = 0
    looping: int = 0
    compared: int = 0

    def plus(self, other: AcceptanceSums) -> AcceptanceSums:
        """Return the sums of both sets of requests."""
        return AcceptanceSums(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(self))
        )

    def length(self) -> AcceptanceLength:
        """Return the pooled acceptance length: tokens per pass over all the requests."""
        return AcceptanceLength(
            length=self.output / self.passes if self.passes > 0 else None,
            requests=self.requests,
            looping=self.looping,
            compared=self.compared,
        )


def passes(output: FloatArray, accepted: FloatArray) -> FloatArray:
    """Return each request's target forward passes (NaN where the counts cannot be right).

    Args:
        output: tokens the request emitted.
        accepted: of those, drafted tokens the target accepted.

    Returns:
        output - accepted where output > accepted >= 0, else NaN.
    """
    ok = np.isfinite(output) & np.isfinite(accepted) & (accepted >= 0) & (output > accepted)
    return np.where(ok, output - accepted, np.nan)


def looping(
    output: FloatArray,
    accepted: FloatArray,
    drafted: FloatArray,
    distinct_2: FloatArray,
    baseline_distinct_2: FloatArray,
) -> BoolArray:
    """Return which pairs show the repetition-loop signature (False where unreadable).

    Args:
        output, accepted, drafted: the candidate's emitted, accepted and drafted tokens.
        distinct_2: the candidate answer's distinct-2.
        baseline_distinct_2: the baseline answer's, for the same prompt.

    Returns:
        L >= LOOP_SHARE (k + 1) with k = drafted / passes, and distinct-2 below
        LOOP_DISTINCT of the baseline's.
    """
    steps = passes(output, accepted)
    with np.errstate(invalid="ignore", divide="ignore"):
        near_full = output >= LOOP_SHARE * (drafted + steps)
        repeats = distinct_2 < LOOP_DISTINCT * baseline_distinct_2
    return np.asarray(np.isfinite(steps) & (drafted > 0) & near_full & repeats)


def _readable(
    output: FloatArray,
    accepted: FloatArray,
    drafted: FloatArray,
    distinct_2: FloatArray,
    baseline_distinct_2: FloatArray,
) -> BoolArray:
    """Return the pairs the loop guardrail reads: the candidate drafted (so k is known), its
    token counts are consistent and both answers' distinct-2 are known; the SQL fold reads
    the same rows (`gate.verdicts.slices`)."""
    return np.asarray(
        np.isfinite(passes(output, accepted))
        & (drafted > 0)
        & np.isfinite(distinct_2)
        & np.isfinite(baseline_distinct_2)
    )


def loop_outcome(
    output: FloatArray,
    accepted: FloatArray,
    drafted: FloatArray,
    distinct_2: FloatArray,
    baseline_distinct_2: FloatArray,
) -> FloatArray:
    """Return each pair's repetition-loop outcome: 1 looping, 0 not, NaN not readable."""
    readable = _readable(output, accepted, drafted, distinct_2, baseline_distinct_2)
    loops = looping(output, accepted, drafted, distinct_2, baseline_distinct_2)
    return np.where(readable, loops.astype(np.float64), np.nan)


def baseline_collapse(
    output: FloatArray,
    accepted: FloatArray,
    drafted: FloatArray,
    distinct_2: FloatArray,
    baseline_distinct_2: FloatArray,
) -> FloatArray:
    """Return each pair's baseline side of the loop guardrail: 1 where the baseline answer's
    distinct-2 fell below `LOOP_DISTINCT` of the candidate's, 0 not, NaN where the pair is
    not readable (the same pairs as `loop_outcome`)."""
    readable = _readable(output, accepted, drafted, distinct_2, baseline_distinct_2)
    with np.errstate(invalid="ignore"):
        collapsed = baseline_distinct_2 < LOOP_DISTINCT * distinct_2
    return np.where(readable, collapsed.astype(np.float64), np.nan)


def summarise(
    output: FloatArray,
    accepted: FloatArray,
    drafted: FloatArray,
    distinct_2: FloatArray,
    baseline_distinct_2: FloatArray,
) -> AcceptanceLength:
    """Return the pooled acceptance length of requests and their loop signatures."""
    steps = passes(output, accepted)
    known = np.isfinite(steps)
    comparable = known & np.isfinite(distinct_2) & np.isfinite(baseline_distinct_2)
    loops = looping(output, accepted, drafted, distinct_2, baseline_distinct_2)
    return AcceptanceSums(
        output=float(np.sum(output[known])),
        passes=float(np.sum(steps[known])),
        requests=int(known.sum()),
        looping=int(np.sum(loops & comparable)),
        compared=int(comparable.sum()),
    ).length()
