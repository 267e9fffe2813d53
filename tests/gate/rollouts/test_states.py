"""The state machine allows exactly the architecture's transitions."""

from __future__ import annotations

import pytest

from gate.db.enums import RolloutMode, RolloutState
from gate.rollouts.states import Action, PrimaryTarget, routing_plan, target_state

S = RolloutState
ALLOWED = {
    (Action.START, S.PENDING): S.RUNNING,
    (Action.HOLD, S.RUNNING): S.HELD,
    (Action.KILL, S.PENDING): S.KILLED,
    (Action.KILL, S.RUNNING): S.KILLED,
    (Action.KILL, S.HELD): S.KILLED,
    (Action.KILL, S.PROMOTED): S.KILLED,
    (Action.RESUME, S.HELD): S.RUNNING,
    (Action.RESUME, S.KILLED): S.RUNNING,
    (Action.PROMOTE, S.RUNNING): S.PROMOTED,
}


@pytest.mark.parametrize("action", list(Action))
@pytest.mark.parametrize("state", list(RolloutState))
def test_every_action_from_every_state(action, state):
    assert target_state(action, state) == ALLOWED.get((action, state))


def test_killed_and_held_reach_running_only_through_resume():
    for state in (S.KILLED, S.HELD):
        reaching_running = [a for a in Action if target_state(a, state) is S.RUNNING]
        assert reaching_running == [Action.RESUME]


def test_routing_table_matches_the_architecture():
    shadow = routing_plan(S.RUNNING, RolloutMode.SHADOW)
    assert (shadow.primary, shadow.mirror, shadow.control_slice) == (
        PrimaryTarget.BASELINE,
        True,
        True,
    )
    canary = routing_plan(S.RUNNING, RolloutMode.CANARY)
    assert (canary.primary, canary.mirror, canary.control_slice) == (
        PrimaryTarget.SPLIT,
        False,
        True,
    )
    for state in (S.PENDING, S.HELD, S.KILLED):
        for mode in RolloutMode:
            plan = routing_plan(state, mode)
            assert plan.primary is PrimaryTarget.BASELINE and not plan.candidate_traffic
    promoted = routing_plan(S.PROMOTED, RolloutMode.SHADOW)
    assert promoted.primary is PrimaryTarget.CANDIDATE and not promoted.mirror
