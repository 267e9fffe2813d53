"""The gate policy: error budgets, segments and stages, and how a stored policy is read.

Stored with the rollout as YAML or JSON. Every field has a documented default; the
defaults are spelled out, with the reasons for each, in
`gate.stats.policy_defaults.DEFAULT_POLICY_YAML`, and a test keeps that text and the
models in step. The parts a policy is made of (the primary metric, the guardrails,
promotion, arms) and the conventions of their thresholds are in
`gate.stats.policy_sections`; this module holds the whole (`Policy`), what it means at one
stage (`kill_alpha`, `at_stage`, `next_stage_share`, `load_tolerance`) and `load_policy`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from gate.db.enums import RolloutMode
from gate.errors import InvalidPolicy
from gate.stats.ids import ALL, UNDECLARED
from gate.stats.policy_sections import (
    Arms,
    Guardrails,
    PolicyModel,
    Primary,
    Promotion,
    SegmentName,
)

__all__ = ["ALL", "UNDECLARED", "Policy", "load_policy"]

# The prompt classes `gate.request.segments.classify` assigns, each tested on its own by
# default: the one list of them.
DEFAULT_SEGMENTS = ("code", "json", "rag", "chat", "creative")


class Policy(PolicyModel):
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
