"""The backstop for a controller that went silent (Argo Rollouts sends nothing when it
aborts without notifications): a running rollout whose controller missed its check-ins is
held, and an analysis poll with the link's key or a hook call counts as a check-in."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gate.db.base import utcnow
from gate.db.enums import RolloutState
from gate.db.models import AuditEvent, ControllerLink, Rollout
from gate.periodic import watch_controllers
from tests.gate.controllers.conftest import ANALYSIS_KEY

pytestmark = pytest.mark.postgres


def last_seen(specgate, seconds_ago: float) -> None:
    with specgate.sessions() as db, db.begin():
        then = utcnow() - timedelta(seconds=seconds_ago)
        link = db.get(ControllerLink, specgate.rollout_id)
        link.created_at = link.last_polled_at = then
        # Silence counts from the latest of start, link and check-in.
        db.get(Rollout, specgate.rollout_id).started_at = then


def test_a_silent_controller_holds_the_rollout(specgate):
    specgate.start()
    specgate.link("argo-rollouts", poll_interval_s=30, missed_polls=3)
    last_seen(specgate, 89)  # just inside three intervals of 30 s
    assert watch_controllers(specgate.sessions, specgate.bus) == 0
    last_seen(specgate, 91)
    assert watch_controllers(specgate.sessions, specgate.bus) == 1
    assert specgate.state() is RolloutState.HELD
    with specgate.sessions() as db:
        hold = db.scalars(select(AuditEvent).where(AuditEvent.action == "hold")).one()
    assert hold.actor == "specgate:controller-watch" and "90 s" in hold.reason


def test_an_analysis_poll_is_a_check_in(specgate):
    specgate.start()
    specgate.link("argo-rollouts", poll_interval_s=30, missed_polls=3)
    last_seen(specgate, 600)
    answer = specgate.client.get(
        f"/v1/rollouts/{specgate.rollout_id}/analysis", headers=specgate.auth(ANALYSIS_KEY)
    )
    assert answer.status_code == 200
    assert watch_controllers(specgate.sessions, specgate.bus) == 0
    assert specgate.state() is RolloutState.RUNNING


def test_rollouts_without_a_controller_are_left_alone(specgate):
    specgate.start()
    assert watch_controllers(specgate.sessions, specgate.bus) == 0
    assert specgate.state() is RolloutState.RUNNING
