"""The headline's lead after a kill, hold or promote: what, who, when and why."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gate.db.enums import RolloutMode, RolloutState
from gate.db.models import AuditEvent
from gate.reports import glance
from gate.reports import headline as words
from gate.rollouts.exposure import Exposure
from gate.rollouts.states import Action
from gate.routing import service as routing
from gate.stats.policy import load_policy
from tests import factories

AT = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
PROMOTE = {"decision": "promote", "reason_codes": ["promote"], "estimates": [], "n_pairs": 900}


def event(action: str, actor: str, reason: str, **details: float) -> AuditEvent:
    return AuditEvent(action=action, actor=actor, reason=reason, details=details, created_at=AT)


def test_a_controllers_promote_to_the_next_stage_says_where_it_went():
    act = words.act_of(
        event("advance", "key:argo", "analysis passed", stage=1, percent=5), stages=4
    )
    assert act is not None and act.sentence == (
        "Promoted: to stage 2 of 4 (5 %) by key:argo at 2026-11-20 09:30 UTC, "
        'because "analysis passed"'
    )


def test_the_gates_hold_and_a_final_promote_read_as_acts_and_a_start_does_not():
    hold = words.act_of(event("hold", "gate", "HOLD on 300 pairs: dropped 0.21"), stages=1)
    assert hold is not None
    assert hold.sentence == "Held: by the gate at 2026-11-20 09:30 UTC on its verdict"
    final = words.act_of(event("promote", "cli:ann", ""), stages=2)
    assert final is not None
    assert final.sentence.startswith("Promoted: to all of the alias's traffic by cli:ann")
    assert final.sentence.endswith("with no reason given")
    assert words.act_of(event("start", "cli:ann", "go"), stages=1) is None


def test_a_promote_headline_says_what_promoting_does_next():
    policy = load_policy({"stages": [1, 5, 100]})
    first = Exposure(RolloutMode.CANARY, RolloutState.RUNNING, 0.5, 0, (1.0, 5.0, 100.0))
    head = words.headline(PROMOTE, policy=policy, promote_next=words.promotion_next(first))
    assert head.sentence.endswith(
        "promoting moves it to stage 2 of 3: 2.5 % of requests served by the candidate."
    )
    last = Exposure(RolloutMode.SHADOW, RolloutState.RUNNING, 1.0, 2, (1.0, 5.0, 100.0))
    head = words.headline(PROMOTE, policy=policy, promote_next=words.promotion_next(last))
    assert head.sentence.endswith(
        "promoting makes the candidate the route for all of the alias's traffic."
    )


@pytest.mark.postgres
def test_a_controllers_promote_leads_the_glance_until_the_rollout_is_resumed(pg_session):
    db = pg_session
    rollout = factories.rollout(db, name="staged", policy={"stages": [1, 5, 100]})

    def act(action: Action, actor: str, reason: str) -> str:
        routing.change_state(
            db, rollout_id=rollout.id, action=action, actor=actor, reason=reason, publisher=None
        )
        return glance.latest(db, rollout=rollout).headline.sentence

    assert act(Action.START, "cli:ann", "go").startswith("Continue: not enough data yet")
    promoted = act(Action.PROMOTE, "key:argo", "analysis passed")
    assert promoted.startswith("Promoted: to stage 2 of 3 (5 %) by key:argo at ")
    assert ". The gate's latest view: Continue: not enough data yet" in promoted
    held = act(Action.HOLD, "key:ops", "change freeze")
    assert held.startswith("Held: by key:ops at ") and '"change freeze"' in held
    head = (act(Action.RESUME, "key:ops", "freeze over"), glance.latest(db, rollout=rollout))
    assert head[0].startswith("Continue") and head[1].headline.act is None
