"""Sampled-output parity: which pairs may be compared at temperature > 0, and how.

A lossless speculative candidate draws its answer from the target model's distribution,
so for a pair whose two sides were sampled independently under identical settings, any
statistic s of an answer has the same distribution on both sides and the paired
difference d = s(candidate) - s(baseline) has mean zero. A biased verifier moves that
mean (a mode-seeking one raises the answer's mean log-probability under the target,
shortens it or makes it more repetitive). The test is the gate's asymptotic confidence
sequence on the mean of d (`gate.stats.sequences.mean_interval`), two-sided, against a
margin scaled by the sd of d on control (baseline-vs-baseline) pairs.

Everything here is a pure function of values the collector already has per call.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from gate.stats.sequences import FloatArray, Interval, MeanStats, Num, as_array, mean_interval

NATURAL_ENDS = frozenset({"stop", "eos", "tool_calls"})
STATISTICS = ("mean_logprob", "length", "distinct_2")
# The margin in standard deviations of d on control pairs: a shift below a tenth of the
# pair-to-pair spread is within what numerics (batched verification) may move.
MARGIN_SD = 0.1


class Exclusion(StrEnum):
    """Why a pair cannot enter the parity test."""

    GREEDY = "greedy"  # temperature 0 is greedy parity's business
    SETTINGS = "settings_differ"  # sampling parameters or limits differ between the sides
    SEEDED = "seeded"  # a fixed seed shared by both sides: the draws are not independent
    CENSORED = "censored"  # a side ended by a limit (length, deadline), not naturally
    LOGPROBS = "logprobs_one_side"  # log-probabilities on one side only
    FAILED = "failed"  # a side has no answer


@dataclass(frozen=True)
class Side:
    """One call of a pair, as the parity test needs it."""

    temperature: float
    top_p: float = 1.0
    max_tokens: int | None = None
    seed: int | None = None
    deadline_s: float | None = None  # the gateway's limit; only a side it cut is censored
    finish_reason: str | None = None  # None: the call failed or was cut by the deadline
    logprobs: tuple[float, ...] | None = None  # the emitted tokens' log-probabilities
    completion_tokens: int | None = None  # from usage; logprobs must cover every token
    # The count of log-probabilities when only the generation's summary is kept (the
    # collector stores count and sum, not the arrays); `logprobs` wins when given.
    logprob_tokens: int | None = None

    @property
    def has_logprobs(self) -> bool:
        """Return whether the call returned log-probabilities at all."""
        return self.logprobs is not None or self.logprob_tokens is not None

    @property
    def logprobs_complete(self) -> bool:
        """Return whether every emitted token has its log-probability.

        llama.cpp with n-gram speculation reports one entry per verify step, none for the
        accepted drafts: a mean over those would be biased, so such a pair uses the text
        statistics only.
        """
        if not self.has_logprobs:
            return False
        count = len(self.logprobs) if self.logprobs is not None else self.logprob_tokens
        return count is not None and (
            self.completion_tokens is None or count == self.completion_tokens
        )


@dataclass(frozen=True)
class Eligibility:
    """Whether a pair enters the test, and why not."""

    eligible: bool
    reason: Exclusion | None = None
    # Both sides carry complete log-probabilities: `mean_logprob` may be compared.
    logprobs: bool = False


def eligibility(baseline: Side, candidate: Side, *, seeds_vary: bool = False) -> Eligibility:
    """Return whether the pair's two answers are draws under identical settings.

    A seed shared by both sides excludes the pair unless `seeds_vary`: the replayer drew
    it afresh for this request, so each side is still a draw from its route's distribution
    and the pairs independent of each other (only a fixed seed makes d a constant).
    """
    reason = _exclusion(baseline, candidate, seeds_vary)
    both = baseline.logprobs_complete and candidate.logprobs_complete
    return Eligibility(reason is None, reason, reason is None and both)


def _exclusion(baseline: Side, candidate: Side, seeds_vary: bool) -> Exclusion | None:
    if baseline.finish_reason is None or candidate.finish_reason is None:
        return Exclusion.FAILED
    if baseline.temperature <= 0.0 or candidate.temperature <= 0.0:
        return Exclusion.GREEDY
    # Deadlines may differ (the mirror's against the primary's): a side that
    # reached a natural end was not censored by its deadline, whatever the deadline was,
    # and a side the deadline cut has no finish reason (FAILED above). Limits that shape
    # the answer itself (max_tokens) must be identical.
    same = (baseline.temperature, baseline.top_p, baseline.max_tokens)
    if same != (candidate.temperature, candidate.top_p, candidate.max_tokens):
        return Exclusion.SETTINGS
    if baseline.seed is not None and baseline.seed == candidate.seed and not seeds_vary:
        return Exclusion.SEEDED
    if not {baseline.finish_reason, candidate.finish_reason} <= NATURAL_ENDS:
        return Exclusion.CENSORED
    if baseline.has_logprobs != candidate.has_logprobs:
        return Exclusion.LOGPROBS
    return None


@dataclass(frozen=True)
class AnswerStats:
    """The statistics of one answer; `mean_logprob` is None without log-probabilities."""

    length: int
    distinct_2: float
    mean_logprob: float | None = None


def answer_stats(tokens: Sequence[object], logprobs: Sequence[float] | None = None) -> AnswerStats:
    """Return an answer's length, distinct-bigram ratio and mean token log-probability."""
    bigrams = list(itertools.pairwise(tokens))
    distinct = len(set(bigrams)) / len(bigrams) if bigrams else 1.0
    mean = float(np.mean(logprobs)) if logprobs else None
    return AnswerStats(len(tokens), distinct, mean)


def text_distinct_2(output: str | None, *, truncated: bool | None) -> float | None:
    """Return an answer's distinct word-bigram ratio, when its text was kept whole.

    Fixed when the answer lands (`Generation.distinct_2`): retention scrubs the text
    later, and the export must still give replay the value the fold compared.
    """
    if output is None or truncated:
        return None
    return answer_stats(output.split()).distinct_2


def differences(baseline: AnswerStats, candidate: AnswerStats) -> dict[str, float]:
    """Return d = candidate minus baseline for each statistic both answers have."""
    d = {
        "length": float(candidate.length - baseline.length),
        "distinct_2": candidate.distinct_2 - baseline.distinct_2,
    }
    if baseline.mean_logprob is not None and candidate.mean_logprob is not None:
        d["mean_logprob"] = candidate.mean_logprob - baseline.mean_logprob
    return d


def side_alone(side: Side) -> bool:
    """Return whether one answer may enter the unpaired (canary) form: sampled, unseeded,
    ended naturally. The cohorts' settings are compared in aggregate, not per pair."""
    return side.temperature > 0.0 and side.seed is None and side.finish_reason in NATURAL_ENDS


def control_margin(control: MeanStats, *, margin_sd: float = MARGIN_SD) -> FloatArray:
    """Return the margin: `margin_sd` standard deviations of d on control pairs (inf < 2)."""
    n = as_array(control.n)
    mean = as_array(control.total) / np.maximum(n, 1.0)
    var = np.maximum(as_array(control.total_sq) - as_array(control.total) * mean, 0.0)
    sd = np.sqrt(var / np.maximum(n - 1.0, 1.0))
    return np.where(n >= 2, margin_sd * sd, np.inf)


def parity_test(stats: MeanStats, margin: Num, *, alpha: float, n_opt: float) -> FloatArray:
    """Return +1 / -1 where the mean of d is proven above +margin / below -margin, else 0.

    Args:
        stats: count, sum and sum of squares of d over eligible pairs (arrays broadcast).
        margin: the tolerated shift, from `control_margin`.
        alpha: the test's whole kill level, split evenly between the two directions.
        n_opt: sample size where the boundary is tuned to be tightest.

    Returns:
        The proven direction of the shift, 0 while none is proven.
    """
    interval: Interval = mean_interval(
        stats, alpha_lower=alpha / 2, alpha_upper=alpha / 2, n_opt=n_opt
    )
    up = as_array(interval.lower) > margin
    down = as_array(interval.upper) < -as_array(margin)
    return np.asarray(up.astype(np.float64) - down.astype(np.float64))


def explain(statistic: str, direction: int) -> str:
    """Return the verdict's sentence for a statistic that moved in `direction`."""
    if direction == 0:
        return f"{statistic}: no shift proven"
    more = direction > 0
    sentences = {
        "mean_logprob": (
            "candidate answers are more likely under the model than the baseline's: "
            "a mode-seeking sampler"
            if more
            else "candidate answers are less likely under the model than the baseline's: "
            "a sampler that flattens the distribution"
        ),
        "length": "candidate answers are " + ("longer" if more else "shorter"),
        "distinct_2": "candidate answers are "
        + ("less repetitive" if more else "more repetitive (fewer distinct bigrams)"),
    }
    return sentences.get(statistic, f"{statistic} {'rose' if more else 'fell'}")
