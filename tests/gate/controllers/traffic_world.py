"""The cluster a traffic link drives: the fake API server loaded with deploy/k8s/traffic's
examples, a gateway controller and KServe's controller playing their part on status."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from gate.controllers import kube, traffic
from gate.db.models import AuditEvent
from tests.deploy.compose import ROOT
from tests.gate.controllers.kube_fake import FakeApiServer, Server, path_of

EXAMPLES = ROOT / "deploy" / "k8s" / "traffic"
ROUTE = "/apis/gateway.networking.k8s.io/v1/namespaces/llm/httproutes/llama-8b"
POOL = "/apis/inference.networking.k8s.io/v1/namespaces/llm/inferencepools/llama-8b-eagle3"
MEMBERS = "/apis/serving.kserve.io/v1alpha2/namespaces/llm/llminferenceservices/"
STAMP = "2026-11-28T00:00:00Z"
TOKEN = "specgate-service-account-token"


def examples(folder: str) -> list[dict[str, Any]]:
    """Every manifest of one example folder."""
    docs = []
    for path in sorted((EXAMPLES / folder).glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def link_body(folder: str) -> dict[str, Any]:
    """The example's link request."""
    body: dict[str, Any] = json.loads((EXAMPLES / folder / "link.json").read_text())
    return body


def condition(kind: str, ok: bool, generation: int, reason: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": "",
        "observedGeneration": generation,
        "lastTransitionTime": STAMP,
    }


def gateway_controller(fake: FakeApiServer, route: dict[str, Any]) -> None:
    """Accept the route; resolve its refs only when every backend exists."""
    if route["kind"] != "HTTPRoute":
        return
    namespace = route["metadata"]["namespace"]
    refs = [r for rule in route["spec"]["rules"] for r in rule.get("backendRefs") or []]
    missing = [
        r["name"]
        for r in refs
        if r.get("kind") == "InferencePool"
        and f"/apis/inference.networking.k8s.io/v1/namespaces/{namespace}/inferencepools/"
        f"{r['name']}"
        not in fake.objects
    ]
    generation = route["metadata"]["generation"]
    parents = [
        {
            "parentRef": parent,
            "controllerName": "example.com/gateway",
            "conditions": [
                condition("Accepted", True, generation, "Accepted"),
                condition(
                    "ResolvedRefs",
                    not missing,
                    generation,
                    "BackendNotFound" if missing else "ResolvedRefs",
                ),
            ],
        }
        for parent in route["spec"]["parentRefs"]
    ]
    fake.set_status(path_of(route), {"parents": parents})


def kserve_controller(fake: FakeApiServer, member: dict[str, Any]) -> None:
    """Observe the member's generation and report it Ready."""
    if member["kind"] != "LLMInferenceService":
        return
    generation = member["metadata"]["generation"]
    fake.set_status(
        path_of(member),
        {
            "observedGeneration": generation,
            # Knative-style conditions: no observedGeneration of their own.
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": STAMP},
            ],
        },
    )


@dataclass
class Cluster:
    fake: FakeApiServer
    server: Server
    kubeconfig: Path

    def api(self) -> kube.KubeApi:
        """A client as specgate builds one, from the kubeconfig."""
        return kube.connect(self.kubeconfig)

    def route_rule(self) -> dict[str, Any]:
        rule: dict[str, Any] = self.fake.read(ROUTE)["spec"]["rules"][0]
        return rule

    def weights(self) -> dict[str, int]:
        return {r["name"]: r["weight"] for r in self.route_rule()["backendRefs"]}

    def mirrors(self) -> list[dict[str, Any]]:
        return [
            f["requestMirror"]
            for f in self.route_rule().get("filters") or []
            if f["type"] == "RequestMirror"
        ]

    def member(self, name: str) -> dict[str, Any]:
        return self.fake.read(MEMBERS + name)


@pytest.fixture
def cluster(tmp_path) -> Iterator[Cluster]:
    fake = FakeApiServer()
    fake.reactors += [gateway_controller, kserve_controller]
    for doc in examples("gie") + examples("kserve"):
        if doc["kind"] in ("HTTPRoute", "InferencePool", "LLMInferenceService"):
            fake.create(doc)
        if doc["kind"] == "Role":
            fake.rules += doc["rules"]
    # specgate's token gets only what the examples' Roles grant.
    fake.token = TOKEN
    with fake.serve() as server:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "test",
            "contexts": [{"name": "test", "context": {"cluster": "fake", "user": "specgate"}}],
            "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
            "users": [{"name": "specgate", "user": {"token": TOKEN}}],
        }
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        yield Cluster(fake, server, path)


def drive(specgate: Any, cluster: Cluster, confirm_timeout_s: float = 5) -> int:
    """One pass of the traffic driver, as the periodic job runs it."""
    api = cluster.api()
    try:
        return traffic.reconcile_all(
            specgate.sessions, api=api, publisher=specgate.bus, confirm_timeout_s=confirm_timeout_s
        )
    finally:
        api.close()


def audit(specgate: Any, action: str) -> list[AuditEvent]:
    with specgate.sessions() as db:
        return list(
            db.scalars(
                select(AuditEvent).where(AuditEvent.action == action).order_by(AuditEvent.id)
            ).all()
        )
