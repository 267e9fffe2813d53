"""Who and when counts as the controller checking in: only the link's own caller (the
analysis key named at link time, or a Flagger hook token); silence counts from the first
check-in, so the pause before Argo's analysis step never holds; and the controller's next
check-in resumes a rollout the silence hold stopped (never one a person held)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gate.db.base import utcnow
from gate.db.enums import RolloutState
from gate.db.models import AuditEvent, ControllerLink, Rollout
from gate.periodic import watch_controllers
from tests.gate.controllers.conftest import ANALYSIS_KEY, NAME

pytestmark = pytest.mark.postgres


def age(specgate, seconds: float, *, polled: bool) -> None:
    """Move the link, the start and (when `polled`) the last check-in `seconds` back."""
    with specgate.sessions() as db, db.begin():
        then = utcnow() - timedelta(seconds=seconds)
        link = db.get(ControllerLink, specgate.rollout_id)
        link.created_at = then
        link.last_polled_at = then if polled else None
        db.get(Rollout, specgate.rollout_id).started_at = then


def poll(specgate, key: str, *, by_name: bool = False) -> dict[str, object]:
    url, params = f"/v1/rollouts/{specgate.rollout_id}/analysis", {}
    if by_name:
        url, params = "/v1/analysis", {"name": NAME}
    answer = specgate.client.get(url, params=params, headers=specgate.auth(key))
    assert answer.status_code == 200, answer.text
    document: dict[str, object] = answer.json()
    return document


def watch_hold(specgate) -> None:
    age(specgate, 400, polled=True)  # checked in once, then 400 s > 5 x 60 s of silence
    assert watch_controllers(specgate.sessions, specgate.bus) == 1
    assert specgate.state() is RolloutState.HELD


def test_no_hold_before_the_controllers_first_check_in(specgate):
    """The shipped Rollout pauses 10m before its analysis step: no poll comes during it."""
    specgate.start()
    specgate.link("argo-rollouts", poll_interval_s=60, missed_polls=5)
    age(specgate, 9 * 60, polled=False)  # 9 minutes into the pause, no poll yet
    assert watch_controllers(specgate.sessions, specgate.bus) == 0
    assert poll(specgate, ANALYSIS_KEY)["decision"] == "continue"  # Argo's first poll
    assert watch_controllers(specgate.sessions, specgate.bus) == 0
    assert specgate.state() is RolloutState.RUNNING and specgate.candidate_traffic()


def test_the_next_check_in_resumes_a_rollout_the_watch_held(specgate):
    specgate.start()
    specgate.link("argo-rollouts", poll_interval_s=60, missed_polls=5)
    watch_hold(specgate)
    assert not specgate.candidate_traffic()
    assert poll(specgate, ANALYSIS_KEY, by_name=True)["decision"] == "continue"
    assert specgate.state() is RolloutState.RUNNING and specgate.candidate_traffic()
    with specgate.sessions() as db:
        resume = db.scalars(select(AuditEvent).where(AuditEvent.action == "resume")).one()
    assert resume.actor == "argo-rollouts:check-in" and "checked in again" in resume.reason


def test_a_check_in_never_resumes_a_hold_by_a_person(specgate):
    specgate.start()
    specgate.link("argo-rollouts")
    answer = specgate.client.post(
        f"/v1/rollouts/{specgate.rollout_id}/hold",
        json={"reason": "on-call looks at a latency spike"},
        headers=specgate.auth("operate"),
    )
    assert answer.status_code == 200, answer.text
    assert poll(specgate, ANALYSIS_KEY)["decision"] == "hold"
    assert specgate.state() is RolloutState.HELD


@pytest.mark.parametrize("by_name", [False, True])
def test_another_readers_poll_is_not_a_check_in(specgate, by_name):
    specgate.start()
    specgate.link("argo-rollouts", poll_interval_s=60, missed_polls=5)
    age(specgate, 400, polled=True)
    poll(specgate, "read", by_name=by_name)  # a dashboard or a person, not Argo
    assert watch_controllers(specgate.sessions, specgate.bus) == 1
    assert specgate.state() is RolloutState.HELD
    poll(specgate, "read", by_name=by_name)
    assert specgate.state() is RolloutState.HELD  # nor does it resume the hold


def test_an_argo_link_names_an_existing_analysis_key(specgate):
    url = f"/v1/rollouts/{specgate.rollout_id}/controller"
    for extra in ({}, {"analysis_key": "nobody"}):
        body = {"controller": "argo-rollouts", **extra}
        answer = specgate.client.post(url, json=body, headers=specgate.auth("admin"))
        assert answer.status_code == 400, answer.text
    linked = specgate.link("argo-rollouts")
    assert linked["analysis_key"] == ANALYSIS_KEY
