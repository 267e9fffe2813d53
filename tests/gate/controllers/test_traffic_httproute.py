"""specgate drives an HTTPRoute with two InferencePools (deploy/k8s/traffic/gie) itself:
the mirror at the stage's share, weights stage by stage, a kill, a conflict retried, a
person's edit and an API server gone, against a fake API server that enforces the CRDs."""

from __future__ import annotations

import pytest

from gate.db.enums import RolloutMode, RolloutState
from gate.db.models import ControllerLink
from gate.periodic import drive_traffic
from gate.rollouts import service
from gate.rollouts.states import Action
from gate.settings import Settings
from tests import factories
from tests.gate.controllers.traffic_world import (
    POOL,
    ROUTE,
    audit,
    condition,
    drive,
    gateway_controller,
    link_body,
)

pytestmark = pytest.mark.postgres

PLAIN, EAGLE = "llama-8b-plain", "llama-8b-eagle3"
STAGED = {"segments": ["chat"], "warmup_pairs": 50, "min_pairs": 300, "stages": [5, 25, 100]}


def linked(specgate, mode: RolloutMode, gateway: str = "kgateway") -> int:
    """A started rollout with stages 5, 25 and 100 % (sample rate 1), linked to the route."""
    with specgate.sessions() as db, db.begin():
        rollout_id = factories.rollout(
            db, name=f"route-{mode.value}", mode=mode, sample_rate=1.0, policy=STAGED
        ).id
    body = link_body("gie")
    body["target"]["gateway"] = gateway
    answer = specgate.client.post(
        f"/v1/rollouts/{rollout_id}/controller", json=body, headers=specgate.auth("admin")
    )
    assert answer.status_code == 200, answer.text
    act(specgate, rollout_id, Action.START)
    return rollout_id


def act(specgate, rollout_id: int, action: Action) -> None:
    with specgate.sessions() as db, db.begin():
        service.transition(db, rollout_id=rollout_id, action=action, actor="t", reason="t")


def state(specgate, rollout_id: int) -> RolloutState:
    return specgate.state(rollout_id)


def test_a_shadow_rollout_mirrors_the_stage_share_then_promotes_stage_by_stage(specgate, cluster):
    rollout_id = linked(specgate, RolloutMode.SHADOW)
    assert drive(specgate, cluster) == 1
    assert cluster.weights() == {PLAIN: 10000, EAGLE: 0}
    (mirror,) = cluster.mirrors()
    assert mirror["backendRef"]["name"] == EAGLE and mirror["percent"] == 5
    write = audit(specgate, "controller.traffic.write")[-1]
    applied = audit(specgate, "controller.traffic.applied")[-1]
    stored = cluster.fake.read(ROUTE)["metadata"]["resourceVersion"]
    assert write.details["resource_version"] and write.details["dry_run"] == "passed"
    # Confirmed from the gateway's status conditions, at the version now stored.
    assert applied.details["resource_versions"] == {"llama-8b": stored}
    assert drive(specgate, cluster) == 0  # nothing to change

    act(specgate, rollout_id, Action.PROMOTE)
    assert drive(specgate, cluster) == 1
    assert [m["percent"] for m in cluster.mirrors()] == [25]
    act(specgate, rollout_id, Action.PROMOTE)
    act(specgate, rollout_id, Action.PROMOTE)  # the last stage: promoted
    assert state(specgate, rollout_id) is RolloutState.PROMOTED
    assert drive(specgate, cluster) == 1
    assert cluster.weights() == {PLAIN: 0, EAGLE: 10000} and cluster.mirrors() == []


def test_a_canary_moves_weights_stage_by_stage(specgate, cluster):
    rollout_id = linked(specgate, RolloutMode.CANARY)
    drive(specgate, cluster)
    assert cluster.weights() == {PLAIN: 9500, EAGLE: 500}
    act(specgate, rollout_id, Action.PROMOTE)
    drive(specgate, cluster)
    assert cluster.weights() == {PLAIN: 7500, EAGLE: 2500}
    assert [m["percent"] for m in cluster.mirrors()] == [25]


def test_a_kill_zeroes_the_speculative_weight_and_removes_the_mirror(specgate, cluster):
    rollout_id = linked(specgate, RolloutMode.CANARY)
    drive(specgate, cluster)
    act(specgate, rollout_id, Action.KILL)
    assert drive(specgate, cluster) == 1
    assert cluster.weights() == {PLAIN: 10000, EAGLE: 0} and cluster.mirrors() == []
    assert audit(specgate, "controller.traffic.write")[-1].details["weight"] == 0


def test_a_conflict_is_retried_after_reading_again(specgate, cluster):
    linked(specgate, RolloutMode.SHADOW)
    # Someone else's write (a label) lands between specgate's read and its PUT.
    cluster.fake.before_put = lambda: cluster.fake.edit(
        ROUTE, lambda r: r["metadata"].setdefault("labels", {}).update({"team": "llm"})
    )
    assert drive(specgate, cluster) == 1
    puts = [p for m, p in cluster.fake.requests if m == "PUT"]
    assert len(puts) == 3  # dry-run answered 409, then dry-run and write
    route = cluster.fake.read(ROUTE)
    assert route["metadata"]["labels"] == {"team": "llm"}  # the other write is kept
    assert [m["percent"] for m in cluster.mirrors()] == [5]


def test_a_person_editing_the_route_holds_the_rollout_and_is_not_overwritten(specgate, cluster):
    rollout_id = linked(specgate, RolloutMode.CANARY)
    drive(specgate, cluster)

    def bump(route):
        route["spec"]["rules"][0]["backendRefs"][1]["weight"] = 3000

    cluster.fake.edit(ROUTE, bump)
    assert drive(specgate, cluster) == 0
    assert state(specgate, rollout_id) is RolloutState.HELD
    hold = audit(specgate, "hold")[-1]
    assert hold.actor == "specgate:traffic" and "edited outside specgate" in hold.reason
    assert cluster.weights()[EAGLE] == 3000
    # Relinking accepts the edit as the new basis, and a resume drives it again.
    specgate.client.post(
        f"/v1/rollouts/{rollout_id}/controller",
        json=link_body("gie"),
        headers=specgate.auth("admin"),
    )
    act(specgate, rollout_id, Action.RESUME)
    assert drive(specgate, cluster) == 1
    assert cluster.weights() == {PLAIN: 9500, EAGLE: 500}


def test_the_api_server_gone_holds_and_never_promotes(specgate, cluster):
    rollout_id = linked(specgate, RolloutMode.CANARY)
    drive(specgate, cluster)
    cluster.server.stop()
    assert drive(specgate, cluster) == 0
    assert state(specgate, rollout_id) is RolloutState.HELD
    assert "unreachable" in audit(specgate, "hold")[-1].reason


def test_a_missing_speculative_pool_is_never_weighted(specgate, cluster):
    del cluster.fake.objects[POOL]
    rollout_id = linked(specgate, RolloutMode.CANARY)
    assert drive(specgate, cluster) == 0
    assert state(specgate, rollout_id) is RolloutState.HELD
    assert "does not exist" in audit(specgate, "hold")[-1].reason
    assert cluster.weights()[EAGLE] == 0
    assert not [m for m, _ in cluster.fake.requests if m == "PUT"]


def test_a_gateway_without_mirror_percent_gets_weights_only_and_says_so(specgate, cluster):
    with specgate.sessions() as db, db.begin():
        rollout_id = factories.rollout(
            db, name="traefik", mode=RolloutMode.CANARY, policy=STAGED
        ).id
    body = link_body("gie")
    body["target"]["gateway"] = "traefik"
    answer = specgate.client.post(
        f"/v1/rollouts/{rollout_id}/controller", json=body, headers=specgate.auth("admin")
    )
    assert "does not support RequestMirror" in answer.json()["notes"][0]
    act(specgate, rollout_id, Action.START)
    drive(specgate, cluster)
    assert cluster.mirrors() == [] and cluster.weights()[EAGLE] == 50  # 0.1 x 5 %
    with specgate.sessions() as db:
        assert db.get(ControllerLink, rollout_id).written["verified"] is True


def test_the_periodic_job_drives_through_the_configured_kubeconfig(specgate, cluster, pg_url):
    rollout_id = linked(specgate, RolloutMode.SHADOW)
    settings = Settings(database_url=pg_url, secret_key="s", kubeconfig=cluster.kubeconfig)
    assert drive_traffic(specgate.sessions, specgate.bus, settings) == 1
    assert [m["percent"] for m in cluster.mirrors()] == [5]
    # No API server configured at all: held, never driven blind.
    unset = Settings(
        database_url=pg_url, secret_key="s", kubeconfig=cluster.kubeconfig.parent / "none"
    )
    assert drive_traffic(specgate.sessions, specgate.bus, unset) == 0
    assert state(specgate, rollout_id) is RolloutState.HELD
    assert "kubeconfig" in audit(specgate, "hold")[-1].reason


def test_no_next_stage_until_the_status_confirms_the_last_change(specgate, cluster):
    cluster.fake.reactors = []  # the gateway has not reconciled the route yet
    rollout_id = linked(specgate, RolloutMode.CANARY)
    assert drive(specgate, cluster, confirm_timeout_s=0.3) == 1
    assert audit(specgate, "controller.traffic.applied") == []
    act(specgate, rollout_id, Action.PROMOTE)
    assert drive(specgate, cluster, confirm_timeout_s=0.3) == 0  # waits for the status
    assert cluster.weights()[EAGLE] == 500
    gateway_controller(cluster.fake, cluster.fake.read(ROUTE))
    cluster.fake.reactors = [gateway_controller]
    assert drive(specgate, cluster) == 1
    assert len(audit(specgate, "controller.traffic.applied")) == 2
    assert cluster.weights()[EAGLE] == 2500


def test_a_route_the_gateway_refuses_holds_the_rollout(specgate, cluster):
    def refusing(fake, route):
        generation = route["metadata"]["generation"]
        refused = condition("Accepted", False, generation, "NotAllowedByListeners")
        parents = [
            {
                "parentRef": route["spec"]["parentRefs"][0],
                "controllerName": "example.com/gateway",
                "conditions": [
                    refused,
                    condition("ResolvedRefs", True, generation, "ResolvedRefs"),
                ],
            }
        ]
        fake.set_status(ROUTE, {"parents": parents})

    cluster.fake.reactors = [refusing]
    rollout_id = linked(specgate, RolloutMode.CANARY)
    drive(specgate, cluster)
    assert state(specgate, rollout_id) is RolloutState.HELD
    reason = audit(specgate, "hold")[-1].reason
    assert "not applied" in reason and "Accepted is False: NotAllowedByListeners" in reason


def test_an_object_outside_the_role_is_refused_and_holds(specgate, cluster):
    other = cluster.fake.read(ROUTE)
    other["metadata"] = {"name": "other-route", "namespace": "llm"}
    other.pop("status", None)
    cluster.fake.create(other)
    rollout_id = linked(specgate, RolloutMode.CANARY)
    with specgate.sessions() as db, db.begin():
        link = db.get(ControllerLink, rollout_id)
        link.target = {**link.target, "name": "other-route"}
    drive(specgate, cluster)
    assert state(specgate, rollout_id) is RolloutState.HELD
    assert "403" in audit(specgate, "hold")[-1].reason


def test_an_unreachable_api_server_after_promotion_is_recorded_once(specgate, cluster):
    rollout_id = linked(specgate, RolloutMode.CANARY)
    for _ in range(3):
        act(specgate, rollout_id, Action.PROMOTE)
    drive(specgate, cluster)
    cluster.server.stop()
    drive(specgate, cluster)
    drive(specgate, cluster)
    assert state(specgate, rollout_id) is RolloutState.PROMOTED
    (blocked,) = audit(specgate, "controller.traffic.blocked")
    assert "unreachable" in blocked.reason


def test_a_kill_never_waits_behind_a_pass_awaiting_the_status(specgate, cluster):
    # The pass waits for the gateway to confirm its change; meanwhile the rollout's row
    # must be free, or a kill through the API would wait behind it.
    from concurrent.futures import ThreadPoolExecutor

    from sqlalchemy import text

    from gate.rollouts import repository
    from tests.waits import wait_until

    cluster.fake.reactors = []  # no status yet: the pass keeps polling
    rollout_id = linked(specgate, RolloutMode.CANARY)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(drive, specgate, cluster, 60)
        assert wait_until(lambda: cluster.weights()[EAGLE] == 500, timeout=30)
        with specgate.sessions() as session, session.begin():
            session.execute(text("SET LOCAL lock_timeout = '3s'"))  # a deadline, not a timing
            assert repository.get_rollout(session, rollout_id, for_update=True) is not None
        gateway_controller(cluster.fake, cluster.fake.read(ROUTE))  # now it confirms
        assert waiting.result(timeout=60) == 1
    assert len(audit(specgate, "controller.traffic.applied")) == 1
