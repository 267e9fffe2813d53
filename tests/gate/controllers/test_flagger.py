"""Flagger against a running specgate: the shipped Canary's webhooks, called by Flagger's
documented analysis loop. Promotion waits for the gate's promote; a kill in specgate makes
the rollback hook answer 2xx; Flagger's own rollback reaches specgate; a revision Flagger
restarts the analysis for mid-way (a new `checksum`) is held, never promoted on the old
one's pairs; hook tokens are checked, stored only as HMACs and never written to the
access log."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from gate.db.enums import RolloutState
from gate.db.models import AuditEvent, ControllerLink, Rollout
from gate.rollouts import repository
from tests.gate.controllers.harness import FlaggerCanary, manifest
from tests.servers import closed_port

pytestmark = pytest.mark.postgres


def canary(specgate, token: str) -> FlaggerCanary:
    spec = manifest("flagger", "canary.yaml")
    for hook in spec["spec"]["analysis"]["webhooks"]:
        hook["url"] = hook["url"].replace("${SPECGATE_HOOK_TOKEN}", token)
    return FlaggerCanary(spec=spec, base=specgate.base, client=specgate.client)


def begin(flagger: FlaggerCanary) -> None:
    """Ticks until pre-rollout passed (Flagger calls it again each interval until it does)."""
    for _ in range(int(flagger.analysis["threshold"])):
        flagger.tick()
        if flagger.started:
            return
    raise AssertionError(f"pre-rollout never passed: {flagger.calls}")


def run_iterations(flagger: FlaggerCanary) -> None:
    """Ticks until Flagger has done its iterations and asks for promotion."""
    for _ in range(int(flagger.analysis["iterations"]) + 2):
        flagger.tick()
        if flagger.phase != "Progressing":
            return


def test_promotion_is_confirmed_only_once_the_gate_says_promote(specgate):
    token = str(specgate.link("flagger")["hook_token"])
    flagger = canary(specgate, token)
    begin(flagger)
    assert specgate.state() is RolloutState.RUNNING  # pre-rollout found both routes up
    run_iterations(flagger)
    assert flagger.phase == "WaitingPromotion"  # the gate has said nothing yet
    specgate.judge()  # no evaluated pairs yet: the gate's verdict is continue
    for _ in range(3):
        assert flagger.tick() == "WaitingPromotion"  # continue is not promote
    specgate.seed(1500, tpot_ratio=0.6)
    specgate.judge()
    assert flagger.tick() == "Succeeded"
    assert ("confirm-promotion", 200) in flagger.calls and ("post-rollout", 200) in flagger.calls
    # Flagger promoted: its primary (the baseline route) serves the new revision; mirroring ends.
    assert specgate.state() is RolloutState.HELD


def test_a_revision_applied_mid_analysis_is_not_promoted_on_the_old_ones_pairs(specgate):
    """Flagger restarts the analysis for a new revision under the same Canary and webhooks;
    only the payloads' checksum changes. The pairs so far judge the old revision."""
    flagger = canary(specgate, str(specgate.link("flagger")["hook_token"]))
    begin(flagger)
    old = flagger.checksum
    specgate.seed(1500, tpot_ratio=0.6)  # revision A's pairs prove it better
    specgate.judge()
    flagger.change_spec()  # revision B is applied while A is analysed
    assert flagger.tick() == "Progressing"  # "New revision detected! Restarting analysis"
    assert flagger.checksum != old and specgate.state() is RolloutState.RUNNING
    run_iterations(flagger)
    for _ in range(3):
        assert flagger.tick() == "WaitingPromotion"  # B is never confirmed on A's pairs
    assert {status for kind, status in flagger.calls if kind == "confirm-promotion"} == {409}
    assert specgate.state() is RolloutState.HELD and not specgate.candidate_traffic()
    # A Canary with progressive traffic would ask this too; it is refused the same way.
    promotion = next(h for h in flagger.analysis["webhooks"] if h["type"] == "confirm-promotion")
    url = promotion["url"].replace("confirm-promotion", "confirm-traffic-increase")
    flagger.analysis["webhooks"].append(
        promotion | {"name": "increase", "type": "confirm-traffic-increase", "url": url}
    )
    assert flagger.call("confirm-traffic-increase") is False
    with specgate.sessions() as db:
        last = repository.last_change(db, specgate.rollout_id)
        holds = db.scalars(select(AuditEvent).where(AuditEvent.action == "hold")).all()
    assert last is not None and last.actor == "flagger:llm/vllm-llama-8b"
    assert last.reason == (
        f"Flagger restarted the analysis for a new revision (checksum {flagger.checksum}):"
        " the pairs so far judge the old one; create a new rollout for it"
    )
    assert len(holds) == 1  # held once, not at every hook of revision B


def test_a_relink_judges_the_revision_its_first_hook_names(specgate):
    """Relinking is how a person points the link at the revision now under analysis."""
    flagger = canary(specgate, str(specgate.link("flagger")["hook_token"]))
    begin(flagger)
    flagger.change_spec()
    flagger.tick()
    flagger.tick()  # rollback with B's checksum: held
    assert specgate.state() is RolloutState.HELD
    with specgate.sessions() as db:
        link = db.get(ControllerLink, specgate.rollout_id)
        assert link is not None and link.revision_checksum is not None
    specgate.link("flagger")
    with specgate.sessions() as db:
        link = db.get(ControllerLink, specgate.rollout_id)
        assert link is not None and link.revision_checksum is None


def test_a_specgate_kill_makes_the_rollback_hook_answer_2xx(specgate):
    token = str(specgate.link("flagger")["hook_token"])
    flagger = canary(specgate, token)
    begin(flagger)
    for _ in range(2):
        flagger.tick()
    assert flagger.phase == "Progressing"
    assert {status for kind, status in flagger.calls if kind == "rollback"} == {409}
    specgate.kill("acceptance collapsed on tool calls")
    assert flagger.tick() == "Failed"
    assert flagger.calls[-2:] == [("rollback", 200), ("post-rollout", 200)]
    assert specgate.state() is RolloutState.KILLED


def test_a_gate_kill_fails_the_rollout_hook_and_rolls_back(specgate):
    token = str(specgate.link("flagger")["hook_token"])
    flagger = canary(specgate, token)
    begin(flagger)
    assert specgate.state() is RolloutState.RUNNING
    specgate.seed(600, candidate_pass=0.60, baseline_pass=0.85)
    specgate.judge()
    assert specgate.state() is RolloutState.KILLED
    assert flagger.tick() == "Failed"  # the rollback hook now says roll back


def test_flaggers_own_rollback_kills_the_rollout_in_specgate(specgate):
    token = str(specgate.link("flagger")["hook_token"])
    flagger = canary(specgate, token)
    begin(flagger)
    assert specgate.state() is RolloutState.RUNNING and specgate.candidate_traffic()
    flagger.failed_checks = int(flagger.analysis["threshold"])  # e.g. its own metric failed
    assert flagger.tick() == "Failed"
    assert specgate.state() is RolloutState.KILLED
    assert not specgate.candidate_traffic()  # mirroring stopped
    with specgate.sessions() as db:
        kill = db.scalars(select(AuditEvent).where(AuditEvent.action == "kill")).one()
    assert kill.actor == "flagger:llm/vllm-llama-8b" and "Failed" in kill.reason


def test_the_revision_after_a_rollback_is_not_killed_by_flaggers_events(specgate):
    """After a rollback the Canary stays Failed, and Flagger sends the next revision's first
    Events with that phase: the Canary's state, not a verdict on the new revision."""
    flagger = canary(specgate, str(specgate.link("flagger")["hook_token"]))
    begin(flagger)
    specgate.kill("revision A regressed")
    assert flagger.tick() == "Failed"  # rollback 200, "Canary failed!", post-rollout Failed
    name = "llama-8b-eagle3-b"
    second = specgate.next_revision(name)
    flagger.new_revision(str(specgate.link("flagger", second)["hook_token"]), name)
    assert flagger.tick() == "Progressing"
    assert flagger.calls[-1] == ("confirm-rollout", 200)
    passed = "Confirm-rollout check specgate-confirm-rollout passed"
    assert ("Failed", passed, 200) in flagger.events  # Flagger's phase: the old revision's
    for _ in range(4):
        assert flagger.tick() == "Progressing"
    assert specgate.state(second) is RolloutState.RUNNING  # pre-rollout started it
    assert specgate.state() is RolloutState.KILLED
    with specgate.sessions() as db:
        rows = db.scalars(select(AuditEvent).order_by(AuditEvent.id)).all()
    actor = "flagger:llm/vllm-llama-8b"
    of_second = [(e.action, e.actor) for e in rows if e.rollout_id == second]
    assert of_second[-2:] == [("controller.link", "key:admin"), ("start", actor)]
    kills = [(e.rollout_id, e.actor, e.reason) for e in rows if e.action == "kill"]
    assert kills == [(specgate.rollout_id, "key:operate", "revision A regressed")]
    warnings = [e.reason for e in rows if e.action == "controller.event"]
    assert warnings == [
        "Flagger Warning (Canary phase Progressing): Rollback check specgate-rollback passed",
        "Flagger Warning (Canary phase Progressing): Rolling back vllm-llama-8b.llm manual"
        " webhook invoked",
        "Flagger Warning (Canary phase Failed): Canary failed! Scaling down vllm-llama-8b.llm",
    ]
    assert {e.rollout_id for e in rows if e.action == "controller.event"} == {specgate.rollout_id}
    with specgate.sessions() as db:  # what `rollout show` and /ui give as the state's reason
        last = repository.last_change(db, specgate.rollout_id)
    assert last is not None and last.action == "kill" and last.reason == "revision A regressed"


def test_a_wrong_token_is_refused_and_never_rolls_back(specgate):
    specgate.link("flagger")
    flagger = canary(specgate, "sgh_not-the-token-at-all")
    assert flagger.tick() == "Waiting"  # confirm-rollout refused: Flagger does not start
    assert flagger.calls == [("confirm-rollout", 401)]
    assert flagger.call("rollback") is False
    assert specgate.state() is RolloutState.PENDING


def test_a_token_names_one_rollout(specgate):
    token = str(specgate.link("flagger")["hook_token"])
    payload = {"name": "other", "namespace": "llm", "phase": "Progressing",
               "metadata": {"rollout": "someone-else"}}  # fmt: skip
    answer = specgate.client.post(f"/v1/hooks/flagger/rollback/{token}", json=payload)
    assert answer.status_code == 409


@pytest.fixture
def access_log() -> Iterator[list[str]]:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("uvicorn.access")
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield lines
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_the_token_is_stored_as_an_hmac_and_never_logged(specgate, access_log):
    token = str(specgate.link("flagger")["hook_token"])
    flagger = canary(specgate, token)
    begin(flagger)
    flagger.call("rollback")
    with specgate.sessions() as db:
        stored = db.scalars(select(ControllerLink.token_hash)).one()
        audit = " ".join(str(e.details) + e.reason for e in db.scalars(select(AuditEvent)))
    assert stored and token not in stored and token not in audit
    hook_lines = [line for line in access_log if "/v1/hooks/flagger/" in line]
    assert len(hook_lines) >= 3, access_log
    assert all(token not in line and "/***" in line for line in hook_lines), hook_lines


def test_a_token_in_a_miswired_url_is_masked_too(specgate, access_log):
    token = str(specgate.link("flagger")["hook_token"])
    payload = {"name": "vllm-llama-8b", "namespace": "llm"}
    for path in (f"/v1/hooks/flagger/{token}", f"/v1/hooks/flagger/{token}/rollback",
                 f"/v1/hooks/flagger/roll-back/{token}?x=1"):  # fmt: skip
        assert specgate.client.post(path, json=payload).status_code in (404, 405, 422)
    hook_lines = [line for line in access_log if "/v1/hooks/flagger/" in line]
    assert len(hook_lines) == 3 and not any(token in line for line in hook_lines), hook_lines


def test_pre_rollout_waits_for_the_canary_service_to_answer(specgate):
    with specgate.sessions() as db, db.begin():
        rollout = db.get(Rollout, specgate.rollout_id)
        rollout.candidate_route.base_url = f"http://127.0.0.1:{closed_port()}/v1"
    token = str(specgate.link("flagger")["hook_token"])
    flagger = canary(specgate, token)
    assert flagger.tick() == "Progressing"  # confirm-rollout needs only the baseline
    assert flagger.tick() == "Progressing"
    assert flagger.calls[-1] == ("pre-rollout", 409) and flagger.failed_checks == 1
    assert specgate.state() is RolloutState.PENDING  # no mirroring to a canary that is not up


def test_a_token_quoted_in_a_flagger_warning_is_never_stored(specgate):
    token = str(specgate.link("flagger")["hook_token"])
    flagger = canary(specgate, token)
    begin(flagger)
    # Flagger's Event for a failed webhook quotes Go's url.Error, URL and token included.
    url = (
        f"http://specgate-gateway.specgate.svc.cluster.local:8080/v1/hooks/flagger/rollout/{token}"
    )
    payload = {
        "name": "vllm-llama-8b",
        "namespace": "llm",
        "phase": "Failed",
        "metadata": {
            "eventMessage": f'Rollback: webhook failed: Post "{url}": dial tcp: i/o timeout '
            f"(token {token})",
            "eventType": "Warning",
        },
    }
    answer = specgate.client.post(f"/v1/hooks/flagger/event/{token}", json=payload)
    assert answer.status_code == 200, answer.text
    assert specgate.state() is RolloutState.RUNNING  # an event never changes the rollout
    with specgate.sessions() as db:
        event = db.scalars(select(AuditEvent).where(AuditEvent.action == "controller.event")).one()
        stored = " ".join(
            e.actor + e.reason + str(e.details) for e in db.scalars(select(AuditEvent))
        )
    assert "webhook failed" in event.reason and "/v1/hooks/flagger/rollout/***" in event.reason
    assert token not in stored and token[4:] not in stored
