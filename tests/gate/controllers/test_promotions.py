"""A controller's own promotion is recorded as what it is: specgate holds (baseline only,
because the stable Service now serves the new revision and the canary is emptied) with the
audited reason "promoted by <controller>", shown by `/ui`'s rollout list and `rollout show`,
also when the silence hold came first (Argo stops polling once its analysis step passed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gate.db.enums import RolloutState
from gate.periodic import watch_controllers
from tests.gate.controllers.conftest import ANALYSIS_KEY, NAME
from tests.gate.controllers.test_check_ins import poll, watch_hold

pytestmark = pytest.mark.postgres
COMPLETED = {
    "event": "rollout-completed",
    "rollout": NAME,
    "controller_rollout": "llm/vllm-llama-8b",
    "message": "completed by Argo Rollouts",
}


def state_reason(specgate) -> str:
    rows = specgate.client.get("/v1/dashboard/rollouts", headers=specgate.auth("read")).json()
    reason: str = next(r for r in rows if r["id"] == specgate.rollout_id)["state_reason"]
    return reason


def complete(specgate) -> str:
    answer = specgate.client.post(
        "/v1/hooks/argo-rollouts", json=COMPLETED, headers=specgate.auth("operate")
    )
    assert answer.status_code == 200, answer.text
    detail: str = answer.json()["detail"]
    return detail


def test_argos_completion_reads_promoted_by_argo_rollouts(specgate, pg_url):
    specgate.start()
    specgate.link("argo-rollouts")
    assert "promoted by the controller" in complete(specgate)
    assert specgate.state() is RolloutState.HELD and not specgate.candidate_traffic()
    assert state_reason(specgate).startswith("promoted by argo-rollouts: ")
    shown = subprocess.run(
        [sys.executable, "-m", "gate", "rollout", "show", str(specgate.rollout_id),
         "--database-url", pg_url],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert "held by key:operate: promoted by argo-rollouts" in shown, shown


def test_a_completion_after_the_silence_hold_still_reads_promoted(specgate):
    specgate.start()
    specgate.link("argo-rollouts", poll_interval_s=60, missed_polls=5)
    poll(specgate, ANALYSIS_KEY)
    watch_hold(specgate)  # the analysis passed, the last steps run without polls
    assert "has not checked in" in state_reason(specgate)
    assert "promoted by the controller" in complete(specgate)
    assert specgate.state() is RolloutState.HELD
    assert state_reason(specgate).startswith("promoted by argo-rollouts: ")
    assert watch_controllers(specgate.sessions, specgate.bus) == 0
    assert specgate.state() is RolloutState.HELD  # and a late poll does not resume it
    poll(specgate, ANALYSIS_KEY)
    assert specgate.state() is RolloutState.HELD


def test_flaggers_success_reads_promoted_by_flagger(specgate):
    token = str(specgate.link("flagger")["hook_token"])
    specgate.start()
    payload = {"name": "vllm-llama-8b", "namespace": "llm", "phase": "Succeeded"}
    answer = specgate.client.post(f"/v1/hooks/flagger/post-rollout/{token}", json=payload)
    assert answer.status_code == 200, answer.text
    assert specgate.state() is RolloutState.HELD and not specgate.candidate_traffic()
    assert state_reason(specgate).startswith("promoted by flagger: Flagger post-rollout")


def test_the_headline_leads_with_a_completion_after_the_silence_hold(specgate):
    """The promotion recorded over the watch's hold is what holds the rollout now: the
    headline on every surface (the glance API here) leads with it, not with nothing."""
    specgate.start()
    specgate.link("argo-rollouts", poll_interval_s=60, missed_polls=5)
    poll(specgate, ANALYSIS_KEY)
    watch_hold(specgate)
    complete(specgate)
    glance = specgate.client.get(
        f"/v1/rollouts/{specgate.rollout_id}/glance", headers=specgate.auth("read")
    ).json()
    assert "headline" in glance, glance
    head = glance["headline"]
    assert head["decision_words"] == "Held", head
    assert head["sentence"].startswith("Held: by key:operate at "), head["sentence"]
    assert "promoted by argo-rollouts" in head["sentence"]
