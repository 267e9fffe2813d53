"""JSON Schemas from the controllers' CRDs (../shared/crds), strict like the API server."""

from __future__ import annotations

import copy
import os
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.deploy.compose import ROOT

# Beside the main checkout (../shared/crds), or beside the folder of clones.
PLACES = [ROOT.parent / "shared" / "crds", ROOT.parent.parent / "shared" / "crds"]
CRDS = Path(os.environ.get("SPECGATE_CRDS") or next((p for p in PLACES if p.is_dir()), PLACES[0]))
FILES = {
    ("argoproj.io", "Rollout"): "argo-rollouts-rollout-crd.yaml",
    ("argoproj.io", "AnalysisTemplate"): "argo-rollouts-analysis-template-crd.yaml",
    ("argoproj.io", "AnalysisRun"): "argo-rollouts-analysis-run-crd.yaml",
    ("flagger.app", "Canary"): "flagger-crd.yaml",
    (
        "gateway.networking.k8s.io",
        "HTTPRoute",
    ): "gateway-api/gateway.networking.k8s.io_httproutes.yaml",
    ("gateway.networking.k8s.io", "Gateway"): "gateway-api/gateway.networking.k8s.io_gateways.yaml",
    (
        "inference.networking.k8s.io",
        "InferencePool",
    ): "gie/inference.networking.k8s.io_inferencepools.yaml",
    ("llm-d.ai", "InferenceObjective"): "gie/llm-d.ai_inferenceobjectives.yaml",
    (
        "serving.kserve.io",
        "LLMInferenceService",
    ): "kserve/serving.kserve.io_llminferenceservices.yaml",
}


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Turn an openAPIV3Schema into JSON Schema that, like the API server, drops no field:
    unknown fields are errors unless the schema preserves them; `nullable` admits null."""
    out = copy.deepcopy(schema)
    _walk(out)
    return out


def _walk(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _walk(item)
        return
    if not isinstance(node, dict):
        return
    for value in node.values():
        _walk(value)
    if node.get("nullable") and isinstance(node.get("type"), str):
        node["type"] = [node["type"], "null"]
    preserves = node.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in node and "additionalProperties" not in node and not preserves:
        node["additionalProperties"] = False


@cache
def schema_for(api_version: str, kind: str) -> dict[str, Any]:
    """Return the openAPIV3Schema of one served version of one kind, or raise KeyError."""
    group, _, version = api_version.partition("/")
    docs = yaml.safe_load_all((CRDS / FILES[(group, kind)]).read_text())
    crd = next(d for d in docs if d and d["spec"]["names"]["kind"] == kind)
    for served in crd["spec"]["versions"]:
        if served["name"] == version and served.get("served", True):
            schema: dict[str, Any] = served["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(f"{api_version} {kind} is not served by the CRD")


@cache
def validator_for(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    """Return a validator for one served version of one kind, or raise KeyError."""
    return jsonschema.Draft7Validator(strict(schema_for(api_version, kind)))


def is_custom(doc: dict[str, Any]) -> bool:
    """Whether a manifest's kind is one of the controllers' CRDs."""
    return (doc["apiVersion"].split("/")[0], doc["kind"]) in FILES


def errors(doc: dict[str, Any]) -> list[str]:
    """Return every schema error of a custom resource."""
    found = validator_for(doc["apiVersion"], doc["kind"]).iter_errors(doc)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in found]
