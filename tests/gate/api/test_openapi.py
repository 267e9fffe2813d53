"""The OpenAPI document says what the control API refuses: the policy's own schema, the
rehearsal's crossover rule, and the NUL and non-finite values a route may not hold."""

from __future__ import annotations

import json
import re

import pytest

from gate.stats.policy import Policy
from tests import factories

pytestmark = pytest.mark.postgres

ROUTE = {"name": "r-doc", "base_url": "http://e:8000/v1", "model": "m", "role": "baseline"}


def openapi(api) -> dict:
    answer = api.client.get("/openapi.json")
    assert answer.status_code == 200
    return answer.json()


def body_schema(doc: dict, path: str, method: str = "post") -> dict:
    ref = doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return doc["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]]


def test_the_policy_schema_is_published_and_an_unknown_field_is_refused_as_it_says(api):
    doc = openapi(api)
    schemas = doc["components"]["schemas"]
    policy = schemas["Policy"]
    assert policy["additionalProperties"] is False
    assert set(policy["properties"]) == set(Policy.model_fields)
    assert policy["properties"]["alpha_kill"]["exclusiveMaximum"] == 0.5
    guardrails = policy["properties"]["guardrails"]
    assert schemas[guardrails["$ref"].rsplit("/", 1)[1]]["additionalProperties"] is False
    created = body_schema(doc, "/v1/rollouts")["properties"]["policy"]
    patched = body_schema(doc, "/v1/rollouts/{rollout_id}", "patch")["properties"]["policy"]
    assert created["$ref"] == "#/components/schemas/Policy"
    assert {"$ref": "#/components/schemas/Policy"} in patched["anyOf"]
    # Every $ref in the document resolves.
    for ref in set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(doc))):
        assert ref in schemas, ref
    # What the schema says, the API does: one unknown field is a 422.
    answer = api.client.patch(
        f"/v1/rollouts/{api.rollout_id}",
        json={"version": 1, "policy": {"stages": [100], "alpha_kil": 0.01}},
        headers=api.headers("admin"),
    )
    assert answer.status_code == 422 and "alpha_kil" in answer.text, answer.text


def test_the_rehearsal_schema_states_the_crossover_rule(api):
    crossover = body_schema(openapi(api), "/v1/rollouts/{rollout_id}/rehearsals")["properties"][
        "crossover"
    ]
    assert crossover["required"] == ["all"]
    assert "must name `all`" in crossover["description"]
    summary = factories.rehearsal_summary()
    summary["crossover"].pop("all")
    path = f"/v1/rollouts/{api.rollout_id}/rehearsals"
    answer = api.client.post(path, json=summary, headers=api.headers("admin"))
    assert answer.status_code == 422 and "'all'" in answer.text


def test_the_route_schema_states_its_refusals_and_the_api_keeps_to_it(api):
    doc = openapi(api)
    route = body_schema(doc, "/v1/routes")["properties"]
    for field in ("name", "model"):
        assert re.fullmatch(route[field]["pattern"], "a\x00b") is None, field
        assert re.fullmatch(route[field]["pattern"], "ok") is not None, field
    described = route["spec_config"]["description"]
    assert "U+0000" in described and "finite" in described
    headers = api.headers("admin")
    for body, where in (
        ({**ROUTE, "name": "a\x00b"}, "body.name"),
        ({**ROUTE, "model": "m\x00"}, "body.model"),
        ({**ROUTE, "spec_config": {"k": ["x\x00"]}}, "body.spec_config"),
        ({**ROUTE, "spec_config": {"k\x00": 1}}, "body.spec_config"),
    ):
        answer = api.client.post("/v1/routes", json=body, headers=headers)
        assert answer.status_code == 422 and where in answer.text, (body, answer.text)
    # A number JSON can write but no database column can hold (1e400 reads as infinity).
    raw = (
        b'{"name": "r-inf", "base_url": "http://e:8000/v1", "model": "m", "role": "baseline",'
        b' "spec_config": {"k": 1e400}}'
    )
    answer = api.client.post(
        "/v1/routes", content=raw, headers={**headers, "Content-Type": "application/json"}
    )
    assert answer.status_code == 422 and "finite" in answer.text, answer.text
    assert api.client.post("/v1/routes", json=ROUTE, headers=headers).status_code == 201
