"""specgate drives two LLMInferenceService members of one router group
(deploy/k8s/traffic/kserve): weights by stage, a kill stops the speculative member and keeps
its weight for rollback, a person's edit holds; a shadow rollout is refused (no mirror)."""

from __future__ import annotations

import pytest

from gate.db.enums import RolloutMode, RolloutState
from gate.rollouts import service
from gate.rollouts.states import Action
from tests import factories
from tests.gate.controllers.traffic_world import audit, drive, link_body

pytestmark = pytest.mark.postgres

BASE, EAGLE = "llama-8b", "llama-8b-eagle3"
STOP = "serving.kserve.io/stop"
STAGED = {"segments": ["chat"], "warmup_pairs": 50, "min_pairs": 300, "stages": [5, 25, 100]}


def make(specgate, mode: RolloutMode) -> int:
    with specgate.sessions() as db, db.begin():
        return factories.rollout(
            db, name=f"kserve-{mode.value}", mode=mode, sample_rate=1.0, policy=STAGED
        ).id


def link(specgate, rollout_id: int):
    return specgate.client.post(
        f"/v1/rollouts/{rollout_id}/controller",
        json=link_body("kserve"),
        headers=specgate.auth("admin"),
    )


def act(specgate, rollout_id: int, action: Action) -> None:
    with specgate.sessions() as db, db.begin():
        service.transition(db, rollout_id=rollout_id, action=action, actor="t", reason="t")


def weights(cluster) -> dict[str, int]:
    return {n: cluster.member(n)["spec"]["router"]["route"]["weight"] for n in (BASE, EAGLE)}


def annotations(cluster, name: str) -> dict[str, str]:
    return cluster.member(name)["metadata"].get("annotations") or {}


def test_members_get_stage_weights_and_a_kill_stops_the_speculative_one(specgate, cluster):
    rollout_id = make(specgate, RolloutMode.CANARY)
    answer = link(specgate, rollout_id)
    assert answer.status_code == 200 and "no mirror field" in answer.json()["notes"][0]
    act(specgate, rollout_id, Action.START)
    assert drive(specgate, cluster) == 2
    assert weights(cluster) == {BASE: 9500, EAGLE: 500}
    versions = audit(specgate, "controller.traffic.applied")[-1].details["resource_versions"]
    assert versions == {n: cluster.member(n)["metadata"]["resourceVersion"] for n in (BASE, EAGLE)}
    act(specgate, rollout_id, Action.PROMOTE)
    drive(specgate, cluster)
    assert weights(cluster) == {BASE: 7500, EAGLE: 2500}

    act(specgate, rollout_id, Action.KILL)
    assert drive(specgate, cluster) == 1
    assert annotations(cluster, EAGLE) == {STOP: "true"}
    assert weights(cluster)[EAGLE] == 2500  # kept for rollback, as KServe's stop intends
    assert STOP not in annotations(cluster, BASE)


def test_the_speculative_member_never_drops_below_weight_one(specgate, cluster):
    with specgate.sessions() as db, db.begin():
        rollout_id = factories.rollout(
            db, name="tiny", mode=RolloutMode.CANARY, sample_rate=0.001, policy=STAGED
        ).id
    link(specgate, rollout_id)
    act(specgate, rollout_id, Action.START)
    drive(specgate, cluster)
    assert weights(cluster) == {BASE: 9999, EAGLE: 1}


def test_a_person_editing_a_member_holds_the_rollout(specgate, cluster):
    rollout_id = make(specgate, RolloutMode.CANARY)
    link(specgate, rollout_id)
    act(specgate, rollout_id, Action.START)
    drive(specgate, cluster)
    path = "/apis/serving.kserve.io/v1alpha2/namespaces/llm/llminferenceservices/" + EAGLE
    cluster.fake.edit(path, lambda m: m["spec"]["router"]["route"].update(weight=4000))
    assert drive(specgate, cluster) == 0
    assert specgate.state(rollout_id) is RolloutState.HELD
    assert "edited outside specgate" in audit(specgate, "hold")[-1].reason
    assert weights(cluster)[EAGLE] == 4000


def test_a_shadow_rollout_cannot_drive_a_member_pair(specgate, cluster):
    answer = link(specgate, make(specgate, RolloutMode.SHADOW))
    assert answer.status_code == 400
    assert "no mirror field" in answer.json()["detail"]
