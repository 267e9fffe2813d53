"""The rollout state machine and the one table that says what each state means for routing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from gate.db.enums import RolloutMode, RolloutState


class Action(StrEnum):
    START = "start"
    HOLD = "hold"
    KILL = "kill"
    RESUME = "resume"
    PROMOTE = "promote"


S = RolloutState
# Which states each action may leave from, and where it lands. `held -> running` and
# `killed -> running` happen only through RESUME. KILL is allowed from every state so the
# kill switch always works, including as a rollback after a promotion.
TRANSITIONS: Mapping[Action, tuple[frozenset[RolloutState], RolloutState]] = {
    Action.START: (frozenset({S.PENDING}), S.RUNNING),
    Action.HOLD: (frozenset({S.RUNNING}), S.HELD),
    Action.KILL: (frozenset({S.PENDING, S.RUNNING, S.HELD, S.PROMOTED}), S.KILLED),
    Action.RESUME: (frozenset({S.HELD, S.KILLED}), S.RUNNING),
    Action.PROMOTE: (frozenset({S.RUNNING}), S.PROMOTED),
}
# Repeating these on a rollout already in their target state is a no-op, not an error.
IDEMPOTENT: frozenset[Action] = frozenset({Action.KILL, Action.HOLD})


def target_state(action: Action, current: RolloutState) -> RolloutState | None:
    """Return where `action` takes a rollout in `current`, or None when it is not allowed."""
    sources, target = TRANSITIONS[action]
    return target if current in sources else None


class PrimaryTarget(StrEnum):
    BASELINE = "baseline"
    # Canary: the candidate serves its weight, with fallback to the baseline.
    SPLIT = "split"
    CANDIDATE = "candidate"
    # Promoted and routed by load: the candidate serves below the crossover, with
    # fallback to the baseline; sampled requests stay shadow pairs (`gate.gateway.by_load`).
    BY_LOAD = "by_load"


@dataclass(frozen=True)
class RoutingPlan:
    """What the gateway does with a rollout's traffic."""

    primary: PrimaryTarget
    mirror: bool
    control_slice: bool

    @property
    def candidate_traffic(self) -> bool:
        """Whether any request of this rollout reaches the candidate route."""
        return self.mirror or self.primary is not PrimaryTarget.BASELINE


BASELINE_ONLY = RoutingPlan(primary=PrimaryTarget.BASELINE, mirror=False, control_slice=False)

_RUNNING = {
    RolloutMode.SHADOW: RoutingPlan(
        primary=PrimaryTarget.BASELINE, mirror=True, control_slice=True
    ),
    RolloutMode.CANARY: RoutingPlan(primary=PrimaryTarget.SPLIT, mirror=False, control_slice=True),
}
_BY_STATE = {
    S.PENDING: BASELINE_ONLY,
    S.HELD: BASELINE_ONLY,
    S.KILLED: BASELINE_ONLY,
    S.PROMOTED: RoutingPlan(primary=PrimaryTarget.CANDIDATE, mirror=False, control_slice=False),
}


# The gate keeps judging a rollout routed by load on its mirrored pairs: the shadow
# mirror and control slices keep running.
_PROMOTED_BY_LOAD = RoutingPlan(primary=PrimaryTarget.BY_LOAD, mirror=True, control_slice=True)


def routing_plan(state: RolloutState, mode: RolloutMode, *, by_load: bool = False) -> RoutingPlan:
    """Return the routing plan for a rollout in `state` and `mode` (promoted `by_load`:
    the candidate serves below the crossover)."""
    if state is S.RUNNING:
        return _RUNNING[mode]
    if state is S.PROMOTED and by_load:
        return _PROMOTED_BY_LOAD
    return _BY_STATE[state]
