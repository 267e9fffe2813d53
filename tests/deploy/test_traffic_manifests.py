"""deploy/k8s/traffic: the GIE and KServe examples pass their CRDs' schemas (strict: unknown
fields fail), the RBAC passes kubernetes-validate and names only the linked objects, and each
link.json is a target specgate accepts that names objects of its example."""

from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gate.controllers.targets import HttpRouteTarget, KServeTarget
from gate.controllers.traffic import parse_target
from tests.deploy import crds
from tests.deploy.compose import ROOT
from tests.deploy.tools import missing

FOLDER = ROOT / "deploy" / "k8s" / "traffic"
VERSION = "1.33.0"


def documents(example: str) -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for path in sorted((FOLDER / example).glob("*.yaml")):
        found += [(path, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return found


def target(example: str) -> HttpRouteTarget | KServeTarget:
    return parse_target(json.loads((FOLDER / example / "link.json").read_text())["target"])


@pytest.fixture(scope="module", autouse=True)
def _crds_present() -> None:
    if not (crds.CRDS / "gateway-api").is_dir():
        pytest.fail(f"the Gateway API, GIE and KServe CRDs are missing at {crds.CRDS}")


@pytest.mark.parametrize(
    ("example", "kinds"),
    [("gie", {"HTTPRoute", "InferencePool"}), ("kserve", {"LLMInferenceService"})],
)
def test_every_custom_resource_passes_its_crd_schema(example, kinds):
    custom = [(p, d) for p, d in documents(example) if crds.is_custom(d)]
    assert {d["kind"] for _, d in custom} == kinds
    for path, doc in custom:
        assert crds.errors(doc) == [], f"{path.relative_to(ROOT)}: {doc['kind']}"


def test_the_check_refuses_unknown_fields_and_bad_values():
    route = next(d for _, d in documents("gie") if d["kind"] == "HTTPRoute")
    typo = copy.deepcopy(route)
    typo["spec"]["rules"][0]["backendRefs"][1]["wieght"] = 5
    assert any("wieght" in e for e in crds.errors(typo))
    heavy = copy.deepcopy(route)
    heavy["spec"]["rules"][0]["backendRefs"][1]["weight"] = 1_000_001
    assert crds.errors(heavy)
    member = next(d for _, d in documents("kserve") if d["kind"] == "LLMInferenceService")
    mirrored = copy.deepcopy(member)
    mirrored["spec"]["router"]["route"]["mirror"] = {"percent": 5}  # the CRD has none
    assert any("mirror" in e for e in crds.errors(mirrored))


@pytest.mark.parametrize("example", ["gie", "kserve"])
def test_rbac_passes_kubernetes_validate_and_names_only_the_linked_objects(example):
    try:
        kv = importlib.import_module("kubernetes_validate")
    except ImportError:
        missing("kubernetes_validate")
        raise
    plain = [(p, d) for p, d in documents(example) if not crds.is_custom(d)]
    assert {d["kind"] for _, d in plain} == {"Role", "RoleBinding"}
    for _path, doc in plain:
        kv.validate(doc, VERSION, strict=True)
    (role,) = [d for _, d in plain if d["kind"] == "Role"]
    linked = target(example)
    named = {n for rule in role["rules"] for n in rule["resourceNames"]}
    writable = {
        n for rule in role["rules"] if "update" in rule["verbs"] for n in rule["resourceNames"]
    }
    assert all("resourceNames" in rule and "list" not in rule["verbs"] for rule in role["rules"])
    if isinstance(linked, HttpRouteTarget):
        assert writable == {linked.name}
        assert named == {linked.name, linked.baseline.name, linked.speculative.name}
    else:
        assert writable == named == {linked.baseline, linked.speculative}


@pytest.mark.parametrize("example", ["gie", "kserve"])
def test_the_link_names_objects_of_its_example(example):
    linked = target(example)
    names = {(d["kind"], d["metadata"]["name"]) for _, d in documents(example)}
    assert all(d["metadata"]["namespace"] == linked.namespace for _, d in documents(example))
    if isinstance(linked, HttpRouteTarget):
        assert ("HTTPRoute", linked.name) in names
        for backend in (linked.baseline, linked.speculative):
            assert (backend.kind, backend.name) in names
    else:
        for name in (linked.baseline, linked.speculative):
            assert ("LLMInferenceService", name) in names
        groups = {
            d["spec"]["router"]["route"]["group"]
            for _, d in documents(example)
            if d["kind"] == "LLMInferenceService"
        }
        assert groups == {linked.group}
