"""The gate policy: error budgets, primary metric, guardrails, segments and stages.

Stored with the rollout as YAML or JSON. Every field has a documented default; the
defaults are spelled out, with the reasons for each, in `DEFAULT_POLICY_YAML`, and a test
keeps that text and the models in step.

Conventions. A guardrail measures *harm*, candidate minus baseline, positive = worse:
for latency the log of the candidate/baseline ratio, written in the policy as a relative
change (0.10 = 10% slower); for rates the difference of bad-outcome rates in absolute
points (0.01 = one point more failures). `kill_at` is where the kill region starts (kill
when harm is proven above it); `margin` is the non-inferiority margin (promotion needs
harm proven below it). Segment cells get `margin * segment_margin_factor`, because each
segment sees a fraction of the traffic.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gate.db.enums import RolloutMode
from gate.errors import InvalidPolicy
from gate.stats.ids import ALL, UNDECLARED

__all__ = ["ALL", "UNDECLARED", "Policy", "load_policy"]


class _Model(BaseModel):
    # NaN and infinity pass range checks in odd ways (NaN fails every one, inf passes `ge`).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


Share = Annotated[float, Field(ge=0.0, le=1.0)]
SegmentName = Annotated[str, Field(pattern=r"^[a-z0-9_.:-]{1,64}$")]
# The prompt classes `gate.request.segments.classify` assigns, each tested on its own by
# default: the one list of them.
DEFAULT_SEGMENTS = ("code", "json", "rag", "chat", "creative")


class Primary(_Model):
    """The latency metric whose gain justifies the rollout."""

    metric: Literal["tpot", "e2e"] = "tpot"
    min_gain: float = Field(0.05, ge=0.0, lt=1.0)
    kill_slowdown: float = Field(0.10, ge=0.0)


class RatioGuardrail(_Model):
    """A latency guardrail on the mean paired log-ratio, thresholds as relative change."""

    enabled: bool = True
    margin: float = Field(0.10, ge=0.0)
    kill_at: float = Field(0.10, ge=0.0)


class RateGuardrail(_Model):
    """A guardrail on a bad-outcome rate, thresholds in absolute points."""

    enabled: bool = True
    margin: float = Field(0.02, gt=0.0, le=1.0)
    kill_at: float = Field(0.0, ge=0.0, le=1.0)
    # Optional guardrails bind only once they have data (feedback needs served traffic).
    required: bool = True


class TailGuardrail(RateGuardrail):
    """Paired exceedance of the baseline's warm-up quantile (fixed at end of warm-up)."""

    quantile: float = Field(0.99, gt=0.5, lt=1.0)
    margin: float = Field(0.02, gt=0.0, le=1.0)
    kill_at: float = Field(0.005, ge=0.0, le=1.0)


class EvaluatorGuardrails(_Model):
    """Each evaluator's fail rate; `slots` fixes the kill-budget split in advance."""

    default: RateGuardrail = RateGuardrail(margin=0.03, kill_at=0.0)
    overrides: dict[str, RateGuardrail] = Field(default_factory=dict)
    slots: int = Field(4, ge=1)


class GreedyGuardrail(RateGuardrail):
    """Greedy-pair mismatch in excess of the baseline-vs-baseline control slice."""

    evaluator: str = "greedy_parity"
    margin: float = Field(0.03, gt=0.0, le=1.0)
    required: bool = False


class AcceptanceGuardrail(_Model):
    """Per-request draft acceptance: a floor per segment and a collapse detector."""

    enabled: bool = True
    floor: float = Field(0.2, ge=0.0, lt=1.0)
    segment_floors: dict[SegmentName, Share] = Field(default_factory=dict)
    collapse_ratio: float = Field(0.5, gt=0.0, lt=1.0)
    collapse_horizon: int = Field(1_000_000, ge=1)

    def floor_for(self, segment: str) -> float:
        """Return the floor of `segment`."""
        return self.segment_floors.get(segment, self.floor)


class LoadBands(_Model):
    """The primary gain per band of the candidate's load (promotion only; never kills).

    A pair's load is each route's running requests at its start (`gate.pairs.load`).
    Band edges are candidate running requests; `hold_untested_load` holds promotion when
    the highest load with a proven gain lies more than `max_gap` of the baseline's load
    below the candidate's load at the next stage (next stage share x baseline load).
    """

    enabled: bool = True
    edges: list[Annotated[float, Field(gt=0.0)]] = Field(
        default_factory=lambda: [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]
    )
    hold_untested_load: bool = True
    max_gap: float = Field(0.5, gt=0.0, le=1.0)

    @field_validator("edges")
    @classmethod
    def _rising(cls, value: list[float]) -> list[float]:
        if any(a >= b for a, b in itertools.pairwise(value)):
            raise ValueError("load band edges must rise strictly")
        return value


class ParityGuardrail(_Model):
    """Sampled-output parity (temperature > 0): the paired mean of d = s(candidate) -
    s(baseline) per answer statistic, two-sided, in standard deviations of d measured on
    the warm-up's control pairs (its eligible pairs when the control slice has too few).

    On by default: it takes 3 kill shares per tested segment (the other tests' levels
    narrow accordingly), and traffic without eligible sampled pairs leaves its cells empty
    (not required for promotion). A policy opts out with `enabled: false`."""

    enabled: bool = True
    margin_sd: float = Field(0.1, gt=0.0)
    min_scale_pairs: int = Field(20, ge=2)


class ExactnessGuardrail(_Model):
    """Per-token exactness (temperature > 0): each candidate token tested as a draw from
    the target's distribution, read from the call's `top_logprobs` (`gate.exactness`).

    Killed when a deviation beyond `margin_tv` of per-token total variation is proven;
    promotion needs every bin set's deviation proven within `promote_tv` once the
    candidate's tokens were tested. The baseline's own tokens (asked on `control_share`
    of sampled pairs) run the same test as a data-quality alarm, never a kill.
    `logprobs_mode` says what the engines report: `raw` (vLLM's default: the model at
    temperature 1; the request's settings are applied here) or `processed` (vLLM
    `--logprobs-mode processed_logprobs`: the sampling distribution itself). A candidate
    that is lossy by design (typical acceptance, relaxed verification) is declared with
    `lossy: true`: the test is then reported, never killed on."""

    enabled: bool = True
    margin_tv: float = Field(0.003, gt=0.0, lt=0.5)
    promote_tv: float = Field(0.01, gt=0.0, lt=0.5)
    top_logprobs: int = Field(20, ge=1, le=20)
    control_share: float = Field(0.1, ge=0.0, le=1.0)
    logprobs_mode: Literal["raw", "processed"] = "raw"
    lossy: bool = False


class Guardrails(_Model):
    """Every guardrail of the gate."""

    ttft_p50: RatioGuardrail = RatioGuardrail()
    ttft_tail: TailGuardrail = TailGuardrail()
    e2e_tail: TailGuardrail = TailGuardrail()
    failures: RateGuardrail = RateGuardrail(margin=0.015, kill_at=0.0)
    # Canary only: in shadow the client never waits on the candidate, so it cannot cancel it.
    cancels: RateGuardrail = RateGuardrail(margin=0.015, kill_at=0.0)
    evaluators: EvaluatorGuardrails = EvaluatorGuardrails()
    feedback: RateGuardrail = RateGuardrail(margin=0.03, kill_at=0.0, required=False)
    greedy_mismatch: GreedyGuardrail = GreedyGuardrail()
    acceptance: AcceptanceGuardrail = AcceptanceGuardrail()
    # The share of pairs whose candidate shows the repetition-loop signature (issue 40;
    # `gate.stats.acceptance_length`), against the share whose baseline answer collapsed
    # against the candidate's (`baseline_collapse`). Binds once a pair is readable.
    loop: RateGuardrail = RateGuardrail(margin=0.05, kill_at=0.02, required=False)
    load_bands: LoadBands = LoadBands()
    output_parity: ParityGuardrail = ParityGuardrail()
    exactness: ExactnessGuardrail = ExactnessGuardrail()


class Promotion(_Model):
    """What promotion sends to the candidate: everything, or (`route_by_load`) each
    request only while the candidate's running requests are below its segment's
    crossover, from the rollout's recorded rehearsal or its latest verdict's load bands,
    whichever is more recent and proven (`gate.routing.crossover`).

    Off at the crossover C, back on below `max(1, C - hysteresis)`; a crossover measured
    more than `crossover_max_age_s` ago, or none, sends everything to the baseline (no
    speculation).

    Promoted so, the gate judges only load-matched pairs (`load_match`): a mirrored pair's
    two calls meet the loads the routing gave each route, and a route whose latency grows
    with its running requests would look slower or faster by that gap alone."""

    route_by_load: bool = False
    hysteresis: int = Field(1, ge=0, le=1024)
    crossover_max_age_s: float = Field(604_800.0, gt=0.0)
    # The most the two routes' running requests at a pair's start may differ for the gate
    # to judge the pair while the rollout is promoted and routed by load.
    load_match: float = Field(1.0, ge=0.0)


class Arms(_Model):
    """Several candidate configurations in one rollout (`gate.stats.arms`).

    `slots`: the arms budgeted in advance (each arm's gate spends 1 / slots of each alpha);
    `tie_margin`: two arms whose primary ratios are proven within this relative difference
    are tied; `alpha_choice`: the chance, under continuous monitoring, of a strict
    preference between equal arms or of choosing an arm beyond the margin of the best.
    """

    slots: int = Field(4, ge=1, le=64)
    tie_margin: float = Field(0.05, gt=0.0, lt=1.0)
    alpha_choice: float = Field(0.05, gt=0.0, lt=0.5)


class Policy(_Model):
    """A rollout's gate policy."""

    alpha_kill: float = Field(0.025, gt=0.0, lt=0.5)
    alpha_promote: float = Field(0.025, gt=0.0, lt=0.5)
    primary: Primary = Primary()
    guardrails: Guardrails = Guardrails()
    segments: list[SegmentName] = Field(
        default_factory=lambda: list(DEFAULT_SEGMENTS), min_length=1
    )
    segment_margin_factor: float = Field(2.5, ge=1.0)
    stages: list[float] = Field(default_factory=lambda: [1.0, 5.0, 25.0, 100.0], min_length=1)
    promotion: Promotion = Promotion()
    arms: Arms = Arms()
    min_pairs: int = Field(1000, ge=1)
    min_duration_s: float = Field(1800.0, ge=0.0)
    warmup_pairs: int = Field(200, ge=1)
    max_duration_s: float = Field(259_200.0, gt=0.0)
    max_dropped_share: float = Field(0.05, gt=0.0, le=1.0)
    # A candidate route skipped as down (refusing connections) for longer than this is
    # killed: it cannot answer, whatever the pairs say (`kill:candidate_down`).
    max_candidate_down_s: float = Field(300.0, gt=0.0)
    max_cohort_imbalance: float = Field(0.10, gt=0.0)
    auto_kill: bool = True
    # How the task evaluator contains the code it runs. `unsafe-local` (no namespaces,
    # for a laptop without bubblewrap) only when named; /ui and the report flag it.
    sandbox: Literal["bwrap", "unsafe-local"] = "bwrap"
    # The evaluators this rollout runs (None: every built-in one with its defaults). Names
    # and options are checked against the evaluator registry when the rollout is stored.
    evaluators: list[str | dict[str, Any]] | dict[str, dict[str, Any] | None] | None = None

    @field_validator("evaluators", mode="before")
    @classmethod
    def _evaluators(cls, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, Mapping):
            entries = [(name, opts) for name, opts in value.items()]
        elif isinstance(value, list):
            entries = [_evaluator_entry(item) for item in value]
        else:
            raise ValueError(_EVALUATORS_SHAPE)
        names = [name for name, _ in entries]
        for name, options in entries:
            if not isinstance(name, str) or not name:
                raise ValueError(f"evaluator name must be a non-empty string, not {name!r}")
            if options is not None and not isinstance(options, Mapping):
                raise ValueError(f"options of evaluator {name!r} must be a mapping")
            if names.count(name) > 1:
                raise ValueError(f"evaluator {name!r} is named more than once")
        return value

    @model_validator(mode="after")
    def _check(self) -> Policy:
        reserved = {ALL, UNDECLARED} & set(self.segments)
        if reserved or len(set(self.segments)) != len(self.segments):
            raise ValueError(
                f"segments must be unique and must not include {ALL!r} or {UNDECLARED!r}"
            )
        rising = all(a < b for a, b in zip(self.stages, self.stages[1:], strict=False))
        if not rising or not 0 < self.stages[0] <= self.stages[-1] <= 100:
            raise ValueError("stages must rise strictly within (0, 100] percent")
        unknown = set(self.guardrails.acceptance.segment_floors) - set(self.segments)
        if unknown:
            raise ValueError(f"segment_floors name undeclared segments: {sorted(unknown)}")
        return self

    def n_opt(self, segment: str) -> float:
        """Return the sample size where mixture boundaries are tuned to be tightest."""
        return float(self.min_pairs if segment == ALL else self.min_pairs / len(self.segments))

    def margin_scale(self, segment: str) -> float:
        """Return the factor applied to margins in `segment`."""
        return 1.0 if segment == ALL else self.segment_margin_factor


_EVALUATORS_SHAPE = (
    "must be a list of evaluator names or {name, options} entries, or a mapping name -> options"
)


def _evaluator_entry(item: Any) -> tuple[Any, Any]:
    if isinstance(item, str):
        return item, None
    if isinstance(item, Mapping) and "name" in item and set(item) <= {"name", "options"}:
        return item["name"], item.get("options")
    raise ValueError(f"bad evaluator entry {item!r}: {_EVALUATORS_SHAPE}")


def kill_alpha(policy: Policy, stage_index: int) -> float:
    """Return the share of `alpha_kill` that stage `stage_index` (0-based) spends.

    Each stage's tests start afresh on that stage's pairs, so without a split a harmless
    rollout would face `alpha_kill` at every stage: about S x alpha_kill over S stages.
    The stages share it equally, alpha_kill / S, so by the union bound the chance that a
    harmless rollout is killed at any stage is at most alpha_kill.

    Why equal shares: a false kill costs the same at every stage (the rollout is lost), and
    the pairs a real harm takes to be proven grow with log(1 / share) at every stage alike
    (the requests exposed to it until the kill are those pairs, whatever the stage's share
    of traffic), so equal shares minimise the worst stage's cost. Weighting by traffic
    would starve the 1% stage, where a harm should be caught cheapest. Four stages cost
    log(4) more in the boundary: a 3-point evaluator drop took 15% more pairs to kill
    (mean, paired; median 2,225 vs 1,900), measured by `bench/gate_alpha_spending.py`.

    A stage past the policy's last (its stages were shortened mid-rollout) splits as if
    the policy had that many stages.
    """
    if stage_index < 0:
        raise ValueError(f"stage index must be at least 0, not {stage_index}")
    return policy.alpha_kill / max(len(policy.stages), stage_index + 1)


def at_stage(policy: Policy, stage_index: int) -> Policy:
    """Return `policy` with `alpha_kill` set to the share stage `stage_index` spends."""
    return policy.model_copy(update={"alpha_kill": kill_alpha(policy, stage_index)})


def next_stage_share(policy: Policy, stage_index: int, mode: RolloutMode) -> float | None:
    """Return the candidate's traffic share once stage `stage_index` promotes (1.0 at the end),
    or None where that step needs no proof at more load.

    Promoting the last stage hands the candidate all traffic, hence 1.0 there. In shadow
    mode the stages before it only mirror more traffic: no user waits on the candidate, and
    the bigger mirror is how the gain at higher load gets measured, so the load hold applies
    to the final promotion only. In canary mode every stage serves users more of it.
    """
    following = stage_index + 1
    if following >= len(policy.stages):
        return 1.0
    return None if mode is RolloutMode.SHADOW else policy.stages[following] / 100.0


def load_tolerance(policy: Policy, *, promoted: bool) -> float | None:
    """Return the load gap within which the gate judges a pair, or None: every pair counts.

    Only a promoted rollout routed by load (`promotion.route_by_load`) is judged on
    load-matched pairs: both calls' running requests (`gate.pairs.load`) known and at most
    `promotion.load_match` apart. Before promotion the candidate carries only the mirror,
    so matching would leave the stages almost no pairs; the load bands cover that gap.
    A pair without loads (stamped before they were recorded) is not load-matched.
    """
    by_load = promoted and policy.promotion.route_by_load
    return policy.promotion.load_match if by_load else None


def log_ratio(relative: float) -> float:
    """Return the log-ratio threshold of a relative change (0.10 -> log 1.10)."""
    return math.log1p(relative)


def load_policy(source: str | Mapping[str, Any] | None) -> Policy:
    """Build a policy from YAML text or a mapping; None or empty gives the defaults."""
    try:
        data: Any = yaml.safe_load(source) if isinstance(source, str) else source
        return Policy.model_validate(data or {})
    except yaml.YAMLError as exc:
        raise InvalidPolicy(f"invalid gate policy: not YAML ({_one_line(exc)})") from None
    except ValidationError as exc:
        raise InvalidPolicy(f"invalid gate policy: {summary(exc)}") from None


def summary(exc: ValidationError) -> str:
    """Return every error on one line: `where: what; ...`."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        what = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {what}" if where else what)
    return "; ".join(parts)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


DEFAULT_POLICY_YAML = """\
# specgate gate policy. Every value below is the default.
# Harm is candidate minus baseline, positive = worse. Latency thresholds are relative
# changes of the paired ratio (0.10 = 10% slower); rate thresholds are absolute points.
alpha_kill: 0.025       # chance of killing a rollout that harms nothing, over all its
                        # stages (each stage spends an equal share, split below)
alpha_promote: 0.025    # chance of promoting one that misses any promotion criterion
primary:
  metric: tpot          # tpot | e2e: the latency the speculation must improve
  min_gain: 0.05        # promote only once the ratio is proven below 0.95
  kill_slowdown: 0.10   # kill when proven 10% slower (pooled or in any segment)
guardrails:
  ttft_p50:             # TTFT geometric-mean ratio (exp of the mean paired log-ratio;
                        # the name is historical: it is no median)
    enabled: true
    margin: 0.1         # promotion needs TTFT proven less than 10% slower
    kill_at: 0.1        # killed once proven more than 10% slower
  ttft_tail:            # paired exceedance of the baseline's warm-up p99 of TTFT
    enabled: true
    quantile: 0.99
    margin: 0.02        # at most two points more exceedances than the baseline
    kill_at: 0.005      # killed once proven half a point above the baseline
    required: true
  e2e_tail:             # the same for end-to-end latency
    enabled: true
    quantile: 0.99
    margin: 0.02
    kill_at: 0.005
    required: true
  failures:             # route failures (error, timeout, fallback) on either side
    enabled: true
    margin: 0.015
    kill_at: 0.0        # any proven increase kills
    required: true
  cancels:              # canary only: client disconnects / calls served, per cohort
    enabled: true       # (shadow: the client never waits on the mirrored candidate)
    margin: 0.015
    kill_at: 0.0        # any proven increase kills: give-ups can hide a slow candidate
    required: true
  evaluators:           # fail rate of each evaluator (a failed call fails them all)
    default: {enabled: true, margin: 0.03, kill_at: 0.0, required: true}
    overrides: {}       # per evaluator name
    slots: 4            # evaluators budgeted in the kill split (more are counted if seen)
  feedback:             # share of thumbs-down among rated responses (canary only)
    enabled: true
    margin: 0.03
    kill_at: 0.0
    required: false     # binds once feedback exists
  greedy_mismatch:      # greedy pairs' mismatch rate minus the control slice's
    enabled: true
    evaluator: greedy_parity
    margin: 0.03
    kill_at: 0.0
    required: false     # binds once greedy pairs exist
  acceptance:           # per-request draft acceptance (the request is the unit)
    enabled: true
    floor: 0.2          # killed when proven below; promotion needs it proven above
    segment_floors: {}
    collapse_ratio: 0.5 # collapse = acceptance below half its warm-up level
    collapse_horizon: 1000000  # requests per segment the false-alarm budget covers
  loop:                 # repetition loops (issue 40): acceptance length >= 0.9 (k + 1)
    enabled: true       # with distinct-2 below half the baseline answer's (vs the reverse)
    margin: 0.05        # promotion needs the looping share proven below 5 points
    kill_at: 0.02       # killed once proven above 2 points
    required: false     # binds once a pair is readable (drafts, both answers' distinct-2)
  output_parity:        # sampled outputs (temperature > 0): paired mean of d per answer
    enabled: true       # statistic (mean log-prob, length, distinct-2), two-sided; the
    margin_sd: 0.1      # control slice's shift is an alarm, never a kill
    min_scale_pairs: 20 # warm-up pairs with d needed to fix its sd (control first)
  exactness:            # sampled candidate tokens tested one by one against the target's
    enabled: true       # distribution from top_logprobs (probability integral transform)
    margin_tv: 0.003    # killed when per-token total variation beyond this is proven
    promote_tv: 0.01    # promotion: every bin set proven within this (about 50k tokens)
    top_logprobs: 20    # alternatives asked per token (candidate calls, control share)
    control_share: 0.1  # share of sampled pairs whose baseline call is asked (the alarm)
    logprobs_mode: raw  # raw (vLLM default, T=1 values) | processed (sampling distribution)
    lossy: false        # lossy by design: report the test, never kill on it
  load_bands:           # the primary gain per band of the candidate's running requests
    enabled: true       # (promotion only: no kill share; the verdict lists the bands)
    edges: [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]  # band edges, running requests
    hold_untested_load: true  # hold promotion when the gain is proven only at loads
                        # well below what the next stage brings (next share x baseline)
    max_gap: 0.5        # "well below": more than this share of the baseline's load
segments: [code, json, rag, chat, creative]  # declared from request features only
segment_margin_factor: 2.5  # a segment sees ~1/5 of the pairs: ~sqrt(5) wider bounds
stages: [1.0, 5.0, 25.0, 100.0]  # percent of traffic; promote advances one stage
promotion:              # what the promoted rollout routes to the candidate
  route_by_load: false  # true: only below its segment's crossover C (running requests;
                        # the rehearsal's or the live load bands', the more recent proven
                        # one); the mirror slice and the gate keep running
  hysteresis: 1         # off at C, back on below max(1, C - hysteresis): no flapping
  crossover_max_age_s: 604800.0  # an older crossover (or none): all to the baseline
  load_match: 1.0       # promoted so, the gate judges only the mirrored pairs whose two
                        # routes' running requests differ by at most this (and are known)
arms:                   # several candidate configurations in one rollout (pairs name one)
  slots: 4              # arms budgeted: each arm's gate spends alpha / slots
  tie_margin: 0.05      # arms proven within 5% of each other (primary ratio) are tied
  alpha_choice: 0.05    # chance of a strict preference between equal arms, or of
                        # choosing one more than the margin slower than the best
min_pairs: 1000         # complete pairs after warm-up before any promotion
min_duration_s: 1800.0  # and 30 minutes, to cover load swings
warmup_pairs: 200       # excluded from tests; fixes tail thresholds and acceptance level
max_duration_s: 259200.0  # hold after 72 hours without a decision
max_dropped_share: 0.05 # hold when more than 5% of pairs were dropped
max_candidate_down_s: 300.0  # kill when the candidate route is down (refusing
                        # connections, its calls skipped) for longer than 5 minutes
max_cohort_imbalance: 0.1  # hold when a cohort's share is 10% off its expected share
auto_kill: true         # a kill verdict flips the kill switch
sandbox: bwrap          # how the task evaluator contains code: bwrap | unsafe-local
evaluators: null        # which evaluators run; null: all built-ins with their defaults.
                        # A list of names or {name, options} entries, or name -> options:
                        # [schema, {name: task, options: {timeout_s: 5}}]
"""
