"""deploy/k8s/controllers: every custom resource passes its controller's own CRD schema
(strict: unknown fields fail), every other manifest passes kubernetes-validate, and the
pieces agree (Services, analysis wiring, webhooks, notifications)."""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gate.controllers.hooks import FlaggerHook
from tests.deploy import crds
from tests.deploy.compose import ROOT
from tests.deploy.tools import missing

FOLDER = ROOT / "deploy" / "k8s" / "controllers"
VERSION = "1.33.0"
TOKEN = "sgh_" + "x" * 43


def documents() -> list[tuple[Path, dict[str, Any]]]:
    """Every manifest of the examples, with the hook token rendered in as at deploy time."""
    found = []
    for path in sorted(FOLDER.rglob("*.yaml")):
        text = path.read_text().replace("${SPECGATE_HOOK_TOKEN}", TOKEN)
        found += [(path, doc) for doc in yaml.safe_load_all(text) if doc]
    return found


def one(kind: str, folder: str) -> dict[str, Any]:
    """Return the only manifest of `kind` under `folder`."""
    docs = [d for p, d in documents() if d["kind"] == kind and p.parent.name == folder]
    assert len(docs) == 1, (kind, folder)
    return docs[0]


@pytest.fixture(scope="module", autouse=True)
def _crds_present() -> None:
    if not crds.CRDS.is_dir():
        pytest.fail(f"the controllers' CRDs are missing at {crds.CRDS} (set SPECGATE_CRDS)")


def test_every_custom_resource_passes_its_crd_schema():
    custom = [(p, d) for p, d in documents() if crds.is_custom(d)]
    assert {d["kind"] for _, d in custom} == {"Rollout", "AnalysisTemplate", "Canary"}
    for path, doc in custom:
        assert crds.errors(doc) == [], f"{path.relative_to(ROOT)}: {doc['kind']}"


def test_the_crd_check_catches_mistakes():
    template = copy.deepcopy(one("AnalysisTemplate", "argo-rollouts"))
    template["spec"]["metrics"][0]["inconclusiveLimt"] = 3
    assert any("inconclusiveLimt" in e for e in crds.errors(template))
    canary = copy.deepcopy(one("Canary", "flagger"))
    canary["spec"]["analysis"]["webhooks"][0]["type"] = "roll-back"
    assert any("roll-back" in e for e in crds.errors(canary))


def test_every_other_manifest_passes_kubernetes_validate():
    try:
        kv = importlib.import_module("kubernetes_validate")
    except ImportError:
        missing("kubernetes_validate")
        raise
    plain = [(p, d) for p, d in documents() if not crds.is_custom(d)]
    assert {d["kind"] for _, d in plain} >= {"Service", "Secret", "ConfigMap", "Deployment"}
    for version in (VERSION, str(kv.utils.latest_version())):
        for path, doc in plain:
            try:
                kv.validate(doc, version, strict=True)
            except kv.ValidationError as exc:
                pytest.fail(f"{path.relative_to(ROOT)} {doc['kind']} on {version}: {exc}")


def vllm_args(template: dict[str, Any]) -> list[str]:
    return list(template["spec"]["containers"][0]["args"])


@pytest.mark.parametrize(
    ("kind", "folder"), [("Rollout", "argo-rollouts"), ("Deployment", "flagger")]
)
def test_the_new_template_turns_on_speculation_with_per_request_metrics(kind, folder):
    args = vllm_args(one(kind, folder)["spec"]["template"])
    config = yaml.safe_load(args[args.index("--speculative-config") + 1])
    assert config["method"] and config["num_speculative_tokens"] >= 1
    assert args[args.index("--per-request-spec-decode-metrics") + 1] in ("summary", "detailed")


def test_the_rollout_uses_real_services_and_a_gating_analysis_step():
    rollout = one("Rollout", "argo-rollouts")
    canary = rollout["spec"]["strategy"]["canary"]
    services = {d["metadata"]["name"] for p, d in documents() if d["kind"] == "Service"}
    assert {canary["stableService"], canary["canaryService"]} <= services
    steps = canary["steps"]
    assert any("pause" in s for s in steps) and any("setWeight" in s for s in steps)
    analysis = next(s["analysis"] for s in steps if "analysis" in s)
    names = {t["templateName"] for t in analysis["templates"]}
    assert names == {one("AnalysisTemplate", "argo-rollouts")["metadata"]["name"]}
    annotations = rollout["metadata"]["annotations"]
    assert annotations["specgate.io/rollout"] == analysis["args"][0]["value"]
    subscribed = [k for k in annotations if k.startswith("notifications.argoproj.io/")]
    triggers = {k.split("/")[1].split(".")[1] for k in subscribed}
    assert triggers == {"on-rollout-aborted", "on-rollout-completed"}
    configmap = one("ConfigMap", "argo-rollouts")["data"]
    assert {f"trigger.{t}" for t in triggers} <= set(configmap)


def test_the_analysis_template_keeps_measuring_through_a_long_continue():
    metric = one("AnalysisTemplate", "argo-rollouts")["spec"]["metrics"][0]
    assert metric["interval"] and metric["count"] > 1
    assert 0 < metric["inconclusiveLimit"] < metric["count"]
    assert metric["consecutiveSuccessLimit"] >= 1
    assert metric["provider"]["web"]["jsonPath"] == "{$.decision}"


def test_the_canary_calls_every_specgate_hook_with_the_rollout_token():
    canary = one("Canary", "flagger")
    hooks = canary["spec"]["analysis"]["webhooks"]
    assert {h["type"] for h in hooks} == {hook.value for hook in FlaggerHook} - {
        "confirm-traffic-increase"  # blue/green (kubernetes provider) never increases traffic
    }
    for hook in hooks:
        assert hook["url"].endswith(f"/v1/hooks/flagger/{hook['type']}/{TOKEN}"), hook["url"]
        assert hook["metadata"]["rollout"]
