"""The fake API server refuses what the real one refuses, through specgate's own client:
unknown fields (422), a stale resourceVersion (409), a PUT without one; a dry-run stores
nothing; a PUT of the object keeps its status; merge and JSON patches apply."""

from __future__ import annotations

import pytest

from gate.controllers.kube import KubeError, KubeUnreachable, ObjectRef
from tests.gate.controllers.traffic_world import ROUTE

REF = ObjectRef("gateway.networking.k8s.io", "v1", "httproutes", "llm", "llama-8b")


def test_unknown_fields_are_refused(cluster):
    api = cluster.api()
    route = api.get(REF)
    route["spec"]["rules"][0]["backendRefs"][0]["wieght"] = 1
    with pytest.raises(KubeError) as refused:
        api.replace(REF, route, dry_run=True)
    assert refused.value.status == 422 and "wieght" in refused.value.message


def test_a_stale_or_missing_resource_version_is_refused(cluster):
    api = cluster.api()
    route = api.get(REF)
    cluster.fake.edit(ROUTE, lambda r: r["metadata"].update(labels={"a": "b"}))
    with pytest.raises(KubeError) as stale:
        api.replace(REF, route, dry_run=False)
    assert stale.value.status == 409
    del route["metadata"]["resourceVersion"]
    with pytest.raises(KubeError) as unversioned:
        api.replace(REF, route, dry_run=False)
    assert unversioned.value.status == 422


def test_a_dry_run_stores_nothing_and_status_survives_a_put(cluster):
    api = cluster.api()
    route = api.get(REF)
    version, status = route["metadata"]["resourceVersion"], route["status"]
    route["spec"]["rules"][0]["backendRefs"][1]["weight"] = 7
    route["status"] = {"parents": []}
    answer = api.replace(REF, route, dry_run=True)
    assert answer["metadata"]["generation"] == 2
    assert api.get(REF)["metadata"]["resourceVersion"] == version
    stored = api.replace(REF, route, dry_run=False)
    assert stored["metadata"]["generation"] == 2
    assert stored["status"] == status  # the status subresource is not written by a PUT


def test_defaults_are_applied_as_the_api_server_does(cluster):
    # A backendRef without a weight reads back with the CRD's default (1), as specgate sees.
    cluster.fake.edit(ROUTE, lambda r: r["spec"]["rules"][0]["backendRefs"][0].pop("weight"))
    ref = cluster.api().get(REF)["spec"]["rules"][0]["backendRefs"][0]
    assert ref["weight"] == 1


def test_patches_apply(cluster):
    import httpx

    with httpx.Client(base_url=cluster.server.url) as client:
        merged = client.patch(
            ROUTE,
            json={"metadata": {"labels": {"x": "1"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert merged.status_code == 200 and merged.json()["metadata"]["labels"] == {"x": "1"}
        ops = [{"op": "replace", "path": "/spec/rules/0/backendRefs/1/weight", "value": 9}]
        patched = client.patch(
            ROUTE, json=ops, headers={"Content-Type": "application/json-patch+json"}
        )
        assert patched.json()["spec"]["rules"][0]["backendRefs"][1]["weight"] == 9


def test_a_stopped_server_is_unreachable(cluster):
    api = cluster.api()
    cluster.server.stop()
    with pytest.raises(KubeUnreachable):
        api.get(REF)
