"""Argo Rollouts against a running specgate: the shipped AnalysisTemplate, measured by the
web provider's documented rules, succeeds on promote, fails on a kill (the gate's or a
person's), keeps measuring through a long continue up to its inconclusive limit, and
errors out when specgate is down; an abort notification kills the rollout in specgate."""

from __future__ import annotations

import httpx
import pytest

from gate.db.enums import RolloutState
from gate.db.models import Rollout
from tests.gate.controllers.conftest import ANALYSIS_KEY, NAME, POLICY
from tests.gate.controllers.harness import ArgoMetric, manifest, rollout_outcome
from tests.servers import closed_port

pytestmark = pytest.mark.postgres


def metric(specgate, base: str | None = None) -> ArgoMetric:
    template = manifest("argo-rollouts", "analysis-template.yaml")
    step = next(
        s["analysis"]
        for s in manifest("argo-rollouts", "rollout.yaml")["spec"]["strategy"]["canary"]["steps"]
        if "analysis" in s
    )
    args = {a["name"]: a["value"] for a in step["args"]}
    return ArgoMetric.from_template(
        template, base or specgate.base, **args, **{"specgate-key": specgate.keys[ANALYSIS_KEY]}
    )


def test_a_proven_gain_passes_the_analysis_after_two_promotes(specgate):
    specgate.start()
    specgate.link("argo-rollouts")
    run = metric(specgate)
    assert run.step(specgate.client) == "Running"  # no verdict yet: Inconclusive, not the end
    assert run.values == ["continue"] and run.inconclusive == 1
    specgate.seed(1500, tpot_ratio=0.6)
    specgate.judge()
    assert run.step(specgate.client) == "Running"  # one promote; the template wants two
    assert run.step(specgate.client) == "Successful"
    assert run.values == ["continue", "promote", "promote"]
    assert rollout_outcome(run.phase) == "next step"


def test_a_gate_kill_fails_the_analysis_on_the_next_check(specgate):
    specgate.start()
    run = metric(specgate)
    assert run.step(specgate.client) == "Running"
    # The candidate fails the evaluator 25 points more often: the gate kills on its own.
    specgate.seed(600, candidate_pass=0.60, baseline_pass=0.85)
    specgate.judge()
    assert specgate.state() is RolloutState.KILLED
    assert run.step(specgate.client) == "Failed"
    assert rollout_outcome(run.phase) == "abort"
    document = specgate.client.get(
        "/v1/analysis", params={"name": NAME}, headers=specgate.auth("read")
    ).json()
    assert document["harmful"] and document["killed"] and document["decision"] == "kill"
    assert document["schema"] == "specgate.analysis/v1" and document["policy_version"]
    assert document["pairs"]["seen"] > 0 and document["pairs"]["needed"] == 300
    assert {e["metric"] for e in document["estimates"]} >= {"tpot"}


def test_a_person_killing_in_specgate_fails_the_analysis(specgate):
    specgate.start()
    run = metric(specgate)
    assert run.step(specgate.client) == "Running"
    specgate.kill("on-call saw corrupted tool calls")
    assert run.step(specgate.client) == "Failed"
    document = specgate.client.get(
        f"/v1/rollouts/{specgate.rollout_id}/analysis", headers=specgate.auth("read")
    ).json()
    assert document["killed"] and not document["harmful"]  # a person's kill, not proven harm


def test_a_long_continue_keeps_measuring_up_to_the_inconclusive_limit(specgate):
    specgate.start()
    specgate.seed(1500, tpot_ratio=1.0)  # no gain: the gate keeps saying continue
    specgate.judge()
    run = metric(specgate)
    limit = run.limit("inconclusiveLimit")
    for _ in range(limit):
        assert run.step(specgate.client) == "Running"
    assert run.inconclusive == limit and set(run.values) == {"continue"}
    assert run.step(specgate.client) == "Inconclusive"
    assert rollout_outcome(run.phase) == "paused"


def test_specgate_down_errors_the_analysis_after_the_error_limit(specgate):
    run = metric(specgate, base=f"http://127.0.0.1:{closed_port()}")
    limit = run.limit("consecutiveErrorLimit")
    with httpx.Client(timeout=2) as client:
        for _ in range(limit):
            assert run.step(client) == "Running"
        assert run.step(client) == "Error"
    assert rollout_outcome(run.phase) == "abort"


def test_the_analysis_needs_a_read_key(specgate):
    url = f"/v1/rollouts/{specgate.rollout_id}/analysis"
    assert specgate.client.get(url).status_code == 401
    assert specgate.client.get(url, headers={"Authorization": "Bearer sg_x_y"}).status_code == 401


def test_an_abort_notification_kills_the_rollout_in_specgate(specgate):
    specgate.start()
    assert specgate.candidate_traffic()
    body = {"event": "rollout-aborted", "rollout": NAME, "controller_rollout": "llm/vllm-llama-8b"}
    assert specgate.client.post("/v1/hooks/argo-rollouts", json=body).status_code == 401
    answer = specgate.client.post(
        "/v1/hooks/argo-rollouts", json=body, headers=specgate.auth("operate")
    )
    assert answer.status_code == 200, answer.text
    assert specgate.state() is RolloutState.KILLED
    assert not specgate.candidate_traffic()  # mirroring stopped


def test_linking_a_controller_needs_an_admin_key(specgate):
    url = f"/v1/rollouts/{specgate.rollout_id}/controller"
    body = {"controller": "argo-rollouts", "analysis_key": ANALYSIS_KEY}
    for scope, status in (("read", 403), ("operate", 403), ("admin", 200)):
        assert (
            specgate.client.post(url, json=body, headers=specgate.auth(scope)).status_code == status
        )
    assert specgate.client.post(url, json=body).status_code == 401


def test_without_auto_kill_proven_harm_waits_for_a_person(specgate):
    with specgate.sessions() as db, db.begin():
        db.get(Rollout, specgate.rollout_id).policy = {**POLICY, "auto_kill": False}
    specgate.start()
    specgate.seed(600, candidate_pass=0.60, baseline_pass=0.85)
    specgate.judge()
    assert specgate.state() is RolloutState.RUNNING  # the gate did not act on its own
    run = metric(specgate)
    assert run.step(specgate.client) == "Running" and run.values == ["hold"]
    specgate.kill("confirmed by on-call")
    assert run.step(specgate.client) == "Failed"
