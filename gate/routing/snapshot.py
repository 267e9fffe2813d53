"""An immutable snapshot of routing state, loaded from the database."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session, joinedload

from gate.db.enums import ArmState, RolloutMode, RolloutState
from gate.db.models import Rollout, Route, Verdict
from gate.errors import InvalidPolicy
from gate.rollouts.states import BASELINE_ONLY, RoutingPlan, routing_plan
from gate.routing import crossover
from gate.routing.credentials import DEFAULT_SECRETS_DIR, route_headers
from gate.routing.crossover import ByLoad
from gate.stats.policy import Policy, load_policy
from gate.stats.policy_sections import ExactnessGuardrail, Promotion

log = logging.getLogger(__name__)

# Rollouts the gateway still routes for; finished-and-killed ones keep their alias alive
# on the baseline until a newer rollout takes the alias.
ROUTED_STATES = tuple(RolloutState)


@dataclass(frozen=True)
class RouteTarget:
    """One upstream: where to send a call and what it runs."""

    id: int
    name: str
    base_url: str
    model: str
    fingerprint: str
    provider: str = "vllm"
    # The route's auth header, read from its credential source; kept out of repr and
    # comparisons so it never reaches a log or an error message.
    headers: dict[str, str] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Arm:
    """One active arm of a rollout with several candidates: its name and its route."""

    name: str
    route: RouteTarget
    # What the arm's hash is salted with (`gate.gateway.sampling.choose_arm`), made once.
    salt: bytes = field(default=b"", repr=False)
    # Its weight in the choice (`rollout_arms.weight`): its share is weight / sum.
    weight: float = 1.0


@dataclass(frozen=True)
class ExactnessAsk:
    """What the gateway reads of the policy's per-token exactness guardrail: how many
    alternatives to ask per token, on which share of sampled pairs the baseline is asked
    too, and what the routes' values describe (`gate.exactness_position.Mode`)."""

    top_logprobs: int
    control_share: float
    mode: Literal["raw", "processed"]


@dataclass(frozen=True)
class RolloutRouting:
    """Everything the gateway needs to route one alias, with no database access."""

    rollout_id: int
    alias: str
    state: RolloutState
    mode: RolloutMode
    stage: int
    fraction: float
    version: int
    baseline: RouteTarget
    candidate: RouteTarget
    plan: RoutingPlan
    # Unix times for alerts: when it was killed (0: not killed) and when the gate last
    # judged it (its start until the first verdict; 0: not running).
    killed_at: float = 0.0
    verdict_at: float = 0.0
    # The policy tests sampled-output parity: sampled pairs' calls ask for logprobs.
    parity: bool = False
    # The policy tests per-token exactness: sampled pairs' candidate calls (and the
    # baseline's on a share) ask for `top_logprobs`; None when it does not.
    exactness: ExactnessAsk | None = None
    # Promoted, the candidate serves only below the crossover (`promotion.route_by_load`);
    # None when promotion sends it everything.
    by_load: ByLoad | None = None
    # A rollout with several candidates: its active arms, in the order they were added;
    # empty for a rollout of one candidate (`candidate`).
    arms: tuple[Arm, ...] = ()


@dataclass(frozen=True)
class RoutingSnapshot:
    """All aliases at one moment; `loaded_at` is the monotonic time of the DB read."""

    by_alias: dict[str, RolloutRouting] = field(default_factory=dict)
    loaded_at: float = 0.0

    def with_state(self, rollout_id: int, state: RolloutState, version: int) -> RoutingSnapshot:
        """Return a copy with one rollout moved to `state` (applied from a pub/sub message)."""
        by_alias = dict(self.by_alias)
        for alias, routing in self.by_alias.items():
            if routing.rollout_id == rollout_id and routing.version <= version:
                killed_at = time.time() if state is RolloutState.KILLED else 0.0
                by_alias[alias] = replace(
                    routing,
                    state=state,
                    version=version,
                    plan=routing_plan(state, routing.mode, by_load=routing.by_load is not None),
                    killed_at=killed_at,
                )
        return replace(self, by_alias=by_alias)


def fingerprint(route: Route) -> str:
    """Return a short stable hash of a route's model and speculative configuration."""
    config = {
        "model": route.model,
        "spec_method": route.spec_method,
        "spec_tokens": route.spec_tokens,
        "draft_model": route.draft_model,
        "spec_config": route.spec_config,
    }
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def target(route: Route, secrets_dir: Path = DEFAULT_SECRETS_DIR) -> RouteTarget:
    """Return the routing view of a route row."""
    return RouteTarget(
        id=route.id,
        name=route.name,
        base_url=route.base_url.rstrip("/"),
        model=route.model,
        fingerprint=fingerprint(route),
        provider=str(route.spec_config.get("provider", "vllm")) if route.spec_config else "vllm",
        headers=route_headers(route.name, route.auth, secrets_dir),
    )


def load_snapshot(
    session: Session, *, loaded_at: float, secrets_dir: Path = DEFAULT_SECRETS_DIR
) -> RoutingSnapshot:
    """Read the newest rollout of every alias and its routes."""
    statement = (
        select(Rollout)
        .options(joinedload(Rollout.baseline_route), joinedload(Rollout.candidate_route))
        .order_by(Rollout.id)
    )
    by_alias: dict[str, RolloutRouting] = {}
    for rollout in session.scalars(statement):
        # Later rows win: the newest rollout owns the alias.
        by_alias[rollout.alias] = _routing(rollout, secrets_dir)
    judged = _last_verdicts(session, [r.rollout_id for r in by_alias.values() if r.verdict_at])
    by_alias = {
        alias: replace(r, verdict_at=judged.get(r.rollout_id, r.verdict_at))
        for alias, r in by_alias.items()
    }
    return RoutingSnapshot(by_alias=_with_loads(session, by_alias), loaded_at=loaded_at)


# How old the engine's scraped running requests may be and still stand for its load:
# two scrapes at the default interval (`scrape_interval_s`).
RUNNING_FRESH = crossover.freshness_window(15.0)


def _with_loads(session: Session, by_alias: dict[str, RolloutRouting]) -> dict[str, RolloutRouting]:
    """Give each rollout routed by load its crossover and its candidate's scraped load."""
    routed = [r for r in by_alias.values() if r.by_load is not None]
    if not routed:
        return by_alias
    crossovers = crossover.crossovers(session, [r.rollout_id for r in routed])
    since = datetime.now(UTC) - RUNNING_FRESH
    loads = crossover.running(session, [r.candidate.id for r in routed], since=since)
    for r in routed:
        assert r.by_load is not None
        found = replace(
            r.by_load, crossover=crossovers.get(r.rollout_id), running=loads.get(r.candidate.id)
        )
        by_alias[r.alias] = replace(r, by_load=found)
    return by_alias


def _last_verdicts(session: Session, rollout_ids: list[int]) -> dict[int, float]:
    if not rollout_ids:
        return {}
    statement = (
        select(Verdict.rollout_id, func.max(Verdict.created_at))
        .where(Verdict.rollout_id.in_(rollout_ids))
        .group_by(Verdict.rollout_id)
    )
    return {rollout_id: at.timestamp() for rollout_id, at in session.execute(statement) if at}


def _routing(rollout: Rollout, secrets_dir: Path) -> RolloutRouting:
    try:
        policy = load_policy(rollout.policy)
    except InvalidPolicy as exc:
        # A row stored before a validation rule existed: baseline only, never a failed load.
        log.warning("routing_policy_invalid rollout=%s error=%s", rollout.id, exc.message)
        return replace(_route_with(rollout, 0.0, secrets_dir), plan=BASELINE_ONLY)
    routing = _route_with(rollout, stage_percent(policy, rollout.stage), secrets_dir)
    guardrails = policy.guardrails
    by_load = _by_load(policy.promotion)
    return replace(
        routing,
        parity=guardrails.output_parity.enabled,
        exactness=_exactness(guardrails.exactness),
        by_load=by_load,
        plan=routing_plan(rollout.state, rollout.mode, by_load=by_load is not None),
    )


def _by_load(promotion: Promotion) -> ByLoad | None:
    if not promotion.route_by_load:
        return None
    return ByLoad(hysteresis=promotion.hysteresis, max_age_s=promotion.crossover_max_age_s)


def _exactness(guardrail: ExactnessGuardrail) -> ExactnessAsk | None:
    if not guardrail.enabled:
        return None
    return ExactnessAsk(guardrail.top_logprobs, guardrail.control_share, guardrail.logprobs_mode)


def stage_percent(policy: Policy, stage: int) -> float:
    """Return the traffic percent of rollout stage `stage` (past the last: the last's)."""
    return policy.stages[min(stage, len(policy.stages) - 1)]


def sampled_fraction(sample_rate: float, percent: float) -> float:
    """Return the share of requests a rollout samples at a stage of `percent` (the gateway's
    `fraction`: mirrored in shadow; in canary the candidate's cohort, with a baseline cohort
    of the same size where room is left, `gate.gateway.sampling.assign`)."""
    return sample_rate * percent / 100.0


def canary_candidate_share(fraction: float) -> float | None:
    """Return the candidate's share of a canary stage's sampled requests (None: no baseline
    cohort is left, f >= 1).

    `assign` serves [0, f) by the candidate and [f, min(1, 2f)) by the baseline cohort, so
    the share is 1/2 up to f = 1/2 and f beyond it.
    """
    if fraction >= 1.0:
        return None
    return 0.5 if fraction <= 0.5 else fraction


def _route_with(rollout: Rollout, stage_percent: float, secrets_dir: Path) -> RolloutRouting:
    return RolloutRouting(
        rollout_id=rollout.id,
        alias=rollout.alias,
        state=rollout.state,
        mode=rollout.mode,
        stage=rollout.stage,
        fraction=sampled_fraction(rollout.sample_rate, stage_percent),
        version=rollout.version,
        baseline=target(rollout.baseline_route, secrets_dir),
        candidate=target(rollout.candidate_route, secrets_dir),
        plan=routing_plan(rollout.state, rollout.mode),
        killed_at=_epoch(rollout.ended_at) if rollout.state is RolloutState.KILLED else 0.0,
        verdict_at=_epoch(rollout.started_at) if rollout.state is RolloutState.RUNNING else 0.0,
        arms=tuple(
            Arm(
                arm.name,
                target(arm.route, secrets_dir),
                salt=f"arm:{arm.name}".encode(),
                weight=arm.weight,
            )
            for arm in rollout.arms
            if arm.state is ArmState.ACTIVE
        ),
    )


def _epoch(at: datetime | None) -> float:
    # A rollout killed or started before these times were kept still gets a nonzero time.
    return at.timestamp() if at is not None else 1.0
