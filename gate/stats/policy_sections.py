"""The parts of a gate policy: the primary metric, each guardrail, promotion and arms.

Conventions. A guardrail measures *harm*, candidate minus baseline, positive = worse:
for latency the log of the candidate/baseline ratio, written in the policy as a relative
change (0.10 = 10% slower); for rates the difference of bad-outcome rates in absolute
points (0.01 = one point more failures). `kill_at` is where the kill region starts (kill
when harm is proven above it); `margin` is the non-inferiority margin (promotion needs
harm proven below it). Segment cells get `margin * segment_margin_factor`, because each
segment sees a fraction of the traffic.

`gate.stats.policy.Policy` puts these parts together; `gate.stats.policy_defaults` spells
out every default with its reason.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class PolicyModel(BaseModel):
    """The base of every part of a policy: unknown fields refused, frozen, finite."""

    # NaN and infinity pass range checks in odd ways (NaN fails every one, inf passes `ge`).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


Share = Annotated[float, Field(ge=0.0, le=1.0)]
SegmentName = Annotated[str, Field(pattern=r"^[a-z0-9_.:-]{1,64}$")]


class Primary(PolicyModel):
    """The latency metric whose gain justifies the rollout."""

    metric: Literal["tpot", "e2e"] = "tpot"
    min_gain: float = Field(0.05, ge=0.0, lt=1.0)
    kill_slowdown: float = Field(0.10, ge=0.0)


class RatioGuardrail(PolicyModel):
    """A latency guardrail on the mean paired log-ratio, thresholds as relative change."""

    enabled: bool = True
    margin: float = Field(0.10, ge=0.0)
    kill_at: float = Field(0.10, ge=0.0)


class RateGuardrail(PolicyModel):
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


class EvaluatorGuardrails(PolicyModel):
    """Each evaluator's fail rate; `slots` fixes the kill-budget split in advance."""

    default: RateGuardrail = RateGuardrail(margin=0.03, kill_at=0.0)
    overrides: dict[str, RateGuardrail] = Field(default_factory=dict)
    slots: int = Field(4, ge=1)


class GreedyGuardrail(RateGuardrail):
    """Greedy-pair mismatch in excess of the baseline-vs-baseline control slice."""

    evaluator: str = "greedy_parity"
    margin: float = Field(0.03, gt=0.0, le=1.0)
    required: bool = False


class AcceptanceGuardrail(PolicyModel):
    """Per-request draft acceptance: a floor per segment and a collapse detector."""

    enabled: bool = True
    floor: float = Field(0.2, ge=0.0, lt=1.0)
    segment_floors: dict[SegmentName, Share] = Field(default_factory=dict)
    collapse_ratio: float = Field(0.5, gt=0.0, lt=1.0)
    collapse_horizon: int = Field(1_000_000, ge=1)

    def floor_for(self, segment: str) -> float:
        """Return the floor of `segment`."""
        return self.segment_floors.get(segment, self.floor)


class LoadBands(PolicyModel):
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


class ParityGuardrail(PolicyModel):
    """Sampled-output parity (temperature > 0): the paired mean of d = s(candidate) -
    s(baseline) per answer statistic, two-sided, in standard deviations of d measured on
    the warm-up's control pairs (its eligible pairs when the control slice has too few).

    On by default: it takes 3 kill shares per tested segment (the other tests' levels
    narrow accordingly), and traffic without eligible sampled pairs leaves its cells empty
    (not required for promotion). A policy opts out with `enabled: false`."""

    enabled: bool = True
    margin_sd: float = Field(0.1, gt=0.0)
    min_scale_pairs: int = Field(20, ge=2)


class ExactnessGuardrail(PolicyModel):
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


class Guardrails(PolicyModel):
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


class Promotion(PolicyModel):
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


class Arms(PolicyModel):
    """Several candidate configurations in one rollout (`gate.stats.arms`).

    `slots`: the arms budgeted in advance (each arm's gate spends 1 / slots of each alpha);
    `tie_margin`: two arms whose primary ratios are proven within this relative difference
    are tied; `alpha_choice`: the chance, under continuous monitoring, of a strict
    preference between equal arms or of choosing an arm beyond the margin of the best.
    `reallocate`: at each stage boundary, an arm the last verdict proved behind another
    live arm gets `behind_weight` of a full arm's weight for the next stage
    (`gate.rollouts.arms.reallocate`); off, every arm keeps an equal share. The floor of
    0.05 keeps an arm behind in the running: with no traffic it could neither catch up
    nor be killed.
    """

    slots: int = Field(4, ge=1, le=64)
    tie_margin: float = Field(0.05, gt=0.0, lt=1.0)
    alpha_choice: float = Field(0.05, gt=0.0, lt=0.5)
    reallocate: bool = False
    behind_weight: float = Field(0.25, ge=0.05, le=1.0)
