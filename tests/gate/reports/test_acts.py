"""The headline's lead after a kill, hold or promote: what, who, when and why."""

from __future__ import annotations

from datetime import UTC, datetime

from gate.db.enums import RolloutMode, RolloutState
from gate.db.models import AuditEvent
from gate.reports import headline as words
from gate.rollouts.exposure import Exposure
from gate.stats.policy import load_policy

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
    hold = words.act_of(event("hold", "gate", "hold:dropped_share"), stages=1)
    assert hold is not None and hold.sentence.startswith("Held: by the gate at 2026-11-20")
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
