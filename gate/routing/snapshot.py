"""An immutable snapshot of routing state, loaded from the database."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from gate.db.enums import RolloutMode, RolloutState
from gate.db.models import Rollout, Route
from gate.rollouts.service import stages
from gate.rollouts.states import RoutingPlan, routing_plan
from gate.routing.credentials import DEFAULT_SECRETS_DIR, route_headers

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
                by_alias[alias] = replace(
                    routing, state=state, version=version, plan=routing_plan(state, routing.mode)
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
    return RoutingSnapshot(by_alias=by_alias, loaded_at=loaded_at)


def _routing(rollout: Rollout, secrets_dir: Path) -> RolloutRouting:
    ramp = stages(rollout)
    stage_percent = ramp[min(rollout.stage, len(ramp) - 1)]
    return RolloutRouting(
        rollout_id=rollout.id,
        alias=rollout.alias,
        state=rollout.state,
        mode=rollout.mode,
        stage=rollout.stage,
        fraction=rollout.sample_rate * stage_percent / 100.0,
        version=rollout.version,
        baseline=target(rollout.baseline_route, secrets_dir),
        candidate=target(rollout.candidate_route, secrets_dir),
        plan=routing_plan(rollout.state, rollout.mode),
    )
