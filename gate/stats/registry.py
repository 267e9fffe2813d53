"""The guardrail registry: every guardrail of the gate, declared once.

A declaration says what a guardrail measures (its per-pair input, `Source`), on which
unit (the pair, or the candidate's request), by which test family in each mode (paired
forms in shadow, unpaired forms in canary, or none), which direction is harm, which
segments it is tested in, whether it can kill or only gates promotion, how many shares
of the kill budget it takes, and how its thresholds come from the policy. Replay and
simulation (`gate.stats.cumulative`), the Postgres fold (`gate.verdicts.aggregates`,
`gate.stats.incremental`), the decision rule (`gate.stats.rule`), the verdict, the
weekly report and /ui all iterate `guardrails()`; a new guardrail over an existing
source and family is one more entry in `REGISTRY`.

Metric ids are the stable strings of cells and reason codes (`ttft_p50` stays: stored
verdicts, the API and /ui read it); `label` says what the statistic is.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from gate.db.enums import RolloutMode
from gate.parity import STATISTICS
from gate.stats.ids import ALL, UNDECLARED, MetricId
from gate.stats.policy import Policy, log_ratio
from gate.stats.policy_sections import RateGuardrail


class Source(StrEnum):
    """A guardrail's per-pair input."""

    TTFT = "ttft"
    TPOT = "tpot"
    E2E = "e2e"
    FAILED = "failed"  # a route failure (error, timeout, fallback) of a side
    CANCELLED = "cancelled"  # the client gave up on a side
    EVALUATOR = "evaluator"  # one evaluator's fail (one guardrail per evaluator seen)
    FEEDBACK = "feedback"  # a thumbs-down among rated responses
    GREEDY = "greedy"  # a greedy pair's mismatch, beside the control slice's
    ACCEPTANCE = "acceptance"  # the candidate's accepted / drafted tokens
    PARITY = "parity"  # per-answer statistics of sampled outputs (gate.parity)
    LOAD = "load"  # each route's running requests at the pair's start (gate.pairs.load)
    EXACTNESS = "exactness"  # the candidate's per-token PIT bin sums (gate.exactness)
    # The candidate's repetition-loop signature (gate.stats.acceptance_length.loop_outcome)
    LOOP = "loop"


class Family(StrEnum):
    """The test: which sufficient statistics a cell holds, and how it is judged."""

    PAIRED_LOG_RATIO = "paired_log_ratio"  # MeanStats of clipped log(candidate/baseline)
    PAIRED_DIFFERENCE = "paired_difference"  # PairedCounts of a 0/1 bad outcome
    EXCEEDANCE = "exceedance"  # PairedCounts of exceeding the baseline's warm-up quantile
    UNPAIRED_LOG_MEANS = "unpaired_log_means"  # TwoMeans of log latency per cohort
    UNPAIRED_RATES = "unpaired_rates"  # CohortCounts of a 0/1 bad outcome per cohort
    TWO_RATES = "two_rates"  # TwoCounts: two independent rates (feedback, greedy)
    MEAN_FLOOR = "mean_floor"  # MeanStats of a per-request value in [0, 1], held to a floor
    COLLAPSE = "collapse"  # Shiryaev-Roberts change detector against a warm-up level
    PAIRED_MEAN = "paired_mean"  # MeanStats of a per-pair statistic d, two-sided
    UNPAIRED_MEANS = "unpaired_means"  # TwoMeans of a per-answer statistic per cohort
    BAND = "band"  # the primary gain per band of the candidate's load (promotion only)
    TOKEN_PIT = "token_pit"  # TokenBins: one-sample per-token test (gate.stats.exactness)


class Unit(StrEnum):
    """What one observation is."""

    PAIR = "pair"
    REQUEST = "request"


class Harm(StrEnum):
    """Which way is worse."""

    HIGHER = "higher"
    LOWER = "lower"
    EITHER = "either"  # a shift either way (sampled-output parity)


class Scope(StrEnum):
    """Where a guardrail is tested: pooled and per declared segment, or pooled only."""

    SEGMENTS = "segments"  # `all` and every declared segment
    POOLED = "pooled"  # `all` only


@dataclass(frozen=True)
class Rule:
    """What one cell is held to, on the harm scale (log-ratio or rate difference)."""

    kill_at: float
    margin: float
    required: bool
    floor: float | None = None
    # Harm is a shift either way: proven beyond +kill_at or below -kill_at (each side at
    # half the kill level), inside when within +-margin.
    two_sided: bool = False


Thresholds = Callable[[Policy, str], Rule | None]


@dataclass(frozen=True)
class Guardrail:
    """One guardrail, declared once.

    `thresholds(policy, segment)` gives a cell's rule, or None when the policy disables
    the guardrail; `slots(policy, evaluators_seen)` the kill-budget shares it takes per
    tested segment (0 for promotion-only guardrails). `quantile` is the exceedance
    family's baseline quantile; `control_alarm` marks a data-quality alarm on the
    baseline-vs-baseline control slice (sampled-output parity).
    """

    id: str
    label: str
    source: Source
    unit: Unit
    shadow: Family | None
    canary: Family | None
    thresholds: Thresholds
    harm: Harm = Harm.HIGHER
    scope: Scope = Scope.SEGMENTS
    kills: bool = True
    slots: Callable[[Policy, int], int] | None = None
    quantile: Callable[[Policy], float] | None = None
    control_alarm: bool = False
    # Shown as a candidate/baseline ratio (latency), else as points or a level.
    ratio: bool = False

    def family(self, mode: RolloutMode) -> Family | None:
        """Return the test family in `mode` (None: not tested in that mode)."""
        return self.shadow if mode is RolloutMode.SHADOW else self.canary

    def kill_shares(self, policy: Policy, evaluators_seen: int, *, canary: bool) -> int:
        """Return the kill-budget shares per tested segment (0 when disabled or not killing)."""
        mode = RolloutMode.CANARY if canary else RolloutMode.SHADOW
        if not self.kills or self.family(mode) is None:
            return 0
        # Evaluator slots are budgeted whether or not the default is enabled (overrides may
        # enable single evaluators).
        if self.source is not Source.EVALUATOR and self.thresholds(policy, ALL) is None:
            return 0
        return 1 if self.slots is None else self.slots(policy, evaluators_seen)

    def segments(self, policy: Policy) -> list[str]:
        """Return the segments the guardrail is tested in."""
        return [ALL] if self.scope is Scope.POOLED else [ALL, *policy.segments]


def _primary(metric: str) -> Thresholds:
    def rule(policy: Policy, segment: str) -> Rule | None:
        if policy.primary.metric != metric:
            return None
        slow = log_ratio(policy.primary.kill_slowdown)
        return Rule(kill_at=slow, margin=slow, required=True)

    return rule


def _ttft_ratio(policy: Policy, segment: str) -> Rule | None:
    g = policy.guardrails.ttft_p50
    if not g.enabled:
        return None
    margin = log_ratio(g.margin * policy.margin_scale(segment))
    return Rule(log_ratio(g.kill_at), margin, required=True)


def rate_rule(rate: RateGuardrail, policy: Policy, segment: str) -> Rule | None:
    """Return a rate guardrail's rule in `segment` (margins widened in segments)."""
    if not rate.enabled:
        return None
    return Rule(rate.kill_at, min(rate.margin * policy.margin_scale(segment), 1.0), rate.required)


def _rate(pick: Callable[[Policy], RateGuardrail]) -> Thresholds:
    return lambda policy, segment: rate_rule(pick(policy), policy, segment)


def _acceptance(policy: Policy, segment: str) -> Rule | None:
    g = policy.guardrails.acceptance
    if not g.enabled:
        return None
    return Rule(kill_at=0.0, margin=0.0, required=True, floor=g.floor_for(segment))


def _collapse(policy: Policy, segment: str) -> Rule | None:
    # A detector has no interval: the rule only says whether it is on.
    return Rule(0.0, 0.0, required=False) if policy.guardrails.acceptance.enabled else None


def _evaluators(policy: Policy, segment: str) -> Rule | None:
    return rate_rule(policy.guardrails.evaluators.default, policy, segment)


def _parity(policy: Policy, segment: str) -> Rule | None:
    g = policy.guardrails.output_parity
    if not g.enabled:
        return None
    margin = g.margin_sd * policy.margin_scale(segment)
    # Not required: only sampled (temperature > 0) traffic has eligible pairs.
    return Rule(kill_at=margin, margin=margin, required=False, two_sided=True)


def _exactness(policy: Policy, segment: str) -> Rule | None:
    g = policy.guardrails.exactness
    if not g.enabled:
        return None
    # Lossy by design: reported, never killed on. Not required: only sampled calls with
    # top_logprobs are tested; once some are, promotion needs them proven inside.
    kill_at = math.inf if g.lossy else g.margin_tv
    return Rule(kill_at=kill_at, margin=g.promote_tv, required=False)


def collapse_segments(policy: Policy) -> list[str]:
    """Return the collapse detectors: per declared segment, pooled, and undeclared pooled."""
    return [*policy.segments, ALL, UNDECLARED]


_LATENCY = {"unit": Unit.PAIR, "ratio": True}

REGISTRY: list[Guardrail] = [
    Guardrail("tpot", "time per output token, mean paired log-ratio (primary when chosen)",
              Source.TPOT, shadow=Family.PAIRED_LOG_RATIO, canary=Family.UNPAIRED_LOG_MEANS,
              thresholds=_primary("tpot"), **_LATENCY),  # type: ignore[arg-type]
    Guardrail("e2e", "end-to-end latency, mean paired log-ratio (primary when chosen)",
              Source.E2E, shadow=Family.PAIRED_LOG_RATIO, canary=Family.UNPAIRED_LOG_MEANS,
              thresholds=_primary("e2e"), **_LATENCY),  # type: ignore[arg-type]
    # Named `ttft_p50` in policies, cells and reason codes since the first release; the
    # statistic is the geometric mean of the paired TTFT ratios (exp of the mean log-ratio),
    # a median only when the log-ratios are symmetric.
    Guardrail("ttft_p50", "TTFT geometric-mean ratio (exp of the mean paired log-ratio)",
              Source.TTFT, shadow=Family.PAIRED_LOG_RATIO, canary=Family.UNPAIRED_LOG_MEANS,
              thresholds=_ttft_ratio, **_LATENCY),  # type: ignore[arg-type]
    Guardrail("ttft_tail", "TTFT exceedances of the baseline's warm-up quantile",
              Source.TTFT, Unit.PAIR, Family.EXCEEDANCE, Family.UNPAIRED_RATES,
              _rate(lambda p: p.guardrails.ttft_tail),
              quantile=lambda p: p.guardrails.ttft_tail.quantile),
    Guardrail("e2e_tail", "end-to-end latency exceedances of the baseline's warm-up quantile",
              Source.E2E, Unit.PAIR, Family.EXCEEDANCE, Family.UNPAIRED_RATES,
              _rate(lambda p: p.guardrails.e2e_tail),
              quantile=lambda p: p.guardrails.e2e_tail.quantile),
    Guardrail("failures", "route failures (error, timeout, fallback)",
              Source.FAILED, Unit.PAIR, Family.PAIRED_DIFFERENCE, Family.UNPAIRED_RATES,
              _rate(lambda p: p.guardrails.failures)),
    # Canary only: in shadow the client never waits on the candidate, so it cannot cancel it.
    Guardrail("cancels", "client cancels per cohort (canary only)",
              Source.CANCELLED, Unit.REQUEST, None, Family.UNPAIRED_RATES,
              _rate(lambda p: p.guardrails.cancels)),
    Guardrail("eval", "fail rate of one evaluator (a failed call fails them all)",
              Source.EVALUATOR, Unit.PAIR, Family.PAIRED_DIFFERENCE, Family.UNPAIRED_RATES,
              _evaluators, slots=lambda p, seen: max(p.guardrails.evaluators.slots, seen)),
    Guardrail("feedback", "thumbs-down share among rated responses",
              Source.FEEDBACK, Unit.REQUEST, Family.TWO_RATES, Family.UNPAIRED_RATES,
              _rate(lambda p: p.guardrails.feedback)),
    Guardrail("greedy_mismatch", "greedy pairs' mismatch rate minus the control slice's",
              Source.GREEDY, Unit.PAIR, Family.TWO_RATES, Family.TWO_RATES,
              _rate(lambda p: p.guardrails.greedy_mismatch)),
    Guardrail("acceptance", "mean per-request draft acceptance against its floor",
              Source.ACCEPTANCE, Unit.REQUEST, Family.MEAN_FLOOR, Family.MEAN_FLOOR,
              _acceptance, harm=Harm.LOWER),
    # One detector per declared segment, one pooled over every request and one pooled
    # over the undeclared segments: a collapse where no declared segment sees it is caught.
    Guardrail("acceptance_collapse", "acceptance fallen below a share of its warm-up level",
              Source.ACCEPTANCE, Unit.REQUEST, Family.COLLAPSE, Family.COLLAPSE,
              _collapse, harm=Harm.LOWER, scope=Scope.POOLED,
              slots=lambda p, seen: len(collapse_segments(p))),
    # Too-high acceptance (issue 40): acceptance length near k + 1 with the answer's
    # distinct-2 collapsed against the baseline's, the signature of a repetition loop,
    # which the collapse detector (acceptance falling) misses. Shadow only: it reads the
    # paired baseline answer.
    Guardrail("loop", "repetition loops: acceptance length near k + 1, distinct-2 collapsed",
              Source.LOOP, Unit.PAIR, Family.PAIRED_DIFFERENCE, None,
              _rate(lambda p: p.guardrails.loop)),
    # Sampled-output parity (issue 25): one cell per answer statistic (`parity:<stat>`),
    # d in warm-up standard deviations; mean log-prob only where both sides have complete
    # log-probabilities, length and distinct-2 on every eligible pair. The control slice runs
    # the same test as a data-quality alarm.
    Guardrail("parity", "sampled-output parity: paired mean of d per answer statistic",
              Source.PARITY, Unit.PAIR, Family.PAIRED_MEAN, Family.UNPAIRED_MEANS,
              _parity, harm=Harm.EITHER, slots=lambda p, seen: len(STATISTICS),
              control_alarm=True),
    # Per-token exactness (issue 36): the candidate's tokens, one sample, pooled over
    # segments (a lossy sampler anywhere moves the pooled bins; one kill share). The
    # baseline's own tokens run the same test as a data-quality alarm.
    Guardrail("exactness", "per-token exactness: candidate tokens as draws from the target",
              Source.EXACTNESS, Unit.REQUEST, Family.TOKEN_PIT, Family.TOKEN_PIT,
              _exactness, scope=Scope.POOLED, control_alarm=True),
]  # fmt: skip


# --- load bands (issue 26): promotion only, no kill share -----------------------------


def _load_bands(policy: Policy, segment: str) -> Rule | None:
    # The bands' cells hold the primary's paired log-ratio; the gain must be proven below
    # log(1 - min_gain), as for the pooled gain. `kill_at` is never reached: no kill.
    bands = policy.guardrails.load_bands
    if not bands.enabled:
        return None
    gain = math.log1p(-policy.primary.min_gain)
    return Rule(kill_at=math.inf, margin=gain, required=False)


LOAD_BANDS = Guardrail(
    "load_bands", "primary latency gain per band of the candidate's running requests",
    Source.LOAD, Unit.PAIR, Family.BAND, Family.BAND, _load_bands,
    scope=Scope.POOLED, kills=False, ratio=True,
)  # fmt: skip
REGISTRY.append(LOAD_BANDS)


def banded(policy: Policy) -> Guardrail | None:
    """Return the load-band guardrail when the policy enables it."""
    g = find(LOAD_BANDS.id)
    return g if g is not None and g.thresholds(policy, ALL) is not None else None


_extra: list[Guardrail] = []


def guardrails() -> list[Guardrail]:
    """Return every declared guardrail, in declaration order."""
    return [*REGISTRY, *_extra]


def tested(mode: RolloutMode) -> list[Guardrail]:
    """Return the guardrails with a cell test in `mode` (detectors and bands are not cells)."""
    return [g for g in guardrails() if g.family(mode) not in (None, *_NOT_CELLS)]


# Detectors alarm on their own statistic; bands gate promotion through the load hold.
_NOT_CELLS = (Family.COLLAPSE, Family.BAND)


@contextlib.contextmanager
def declared(*extra: Guardrail) -> Iterator[None]:
    """Add guardrails to the registry for the duration of a block (tests, experiments)."""
    _extra.extend(extra)
    try:
        yield
    finally:
        for g in extra:
            _extra.remove(g)


def find(metric: str) -> Guardrail | None:
    """Return the guardrail of a metric id (an evaluator's id names the `eval` guardrail)."""
    name = metric_id(metric).guardrail
    for g in guardrails():
        if g.id == name:
            return g
    return None


def metric_id(metric: str) -> MetricId:
    """Return the typed id of a metric string as cells and stored reason codes spell it."""
    if isinstance(metric, MetricId):
        return metric
    head, sep, part = metric.partition(":")
    if sep:
        return MetricId(head, part)
    return MetricId(metric)


def rule_for(policy: Policy, metric: str, segment: str) -> Rule | None:
    """Return the rule of a cell, or None when the policy does not gate it."""
    if segment != ALL and segment not in policy.segments:
        return None
    typed = metric_id(metric)
    g = find(typed)
    if g is None or g.shadow in _NOT_CELLS:
        return None  # detectors and bands are no cells
    if typed.evaluator is not None:
        override = policy.guardrails.evaluators.overrides.get(typed.evaluator)
        if override is not None:
            return rate_rule(override, policy, segment)
    return g.thresholds(policy, segment)


def kill_slots(policy: Policy, evaluators_seen: int = 0, *, canary: bool = False) -> int:
    """Return how many tests share the kill budget (fixed by the policy and mode in advance)."""
    total = 0
    for g in guardrails():
        # A detector's shares are its detectors; a cell test takes its shares per segment.
        per = 1 if g.shadow is Family.COLLAPSE else len(g.segments(policy))
        total += g.kill_shares(policy, evaluators_seen, canary=canary) * per
    return total


def alpha_kill_each(policy: Policy, evaluators_seen: int = 0, *, canary: bool = False) -> float:
    """Return the kill level of one guardrail x segment test (Bonferroni split)."""
    return policy.alpha_kill / kill_slots(policy, evaluators_seen, canary=canary)
