"""What an OpenAI client sees of the gateway's own answers: error codes, methods, media
types, chunks; and the request body stored as the client sent it."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from gate.db.enums import RolloutMode
from gate.engines.sim import SimProfile
from gate.telemetry import attributes as A
from tests.gate.gateway.conftest import ALIAS, gateway_stack
from tests.gate.gateway.test_proxy import MESSAGES, wait_until

BODY = {"model": ALIAS, "messages": MESSAGES}


def test_a_body_that_is_not_declared_json_gets_415(stack):
    response = httpx.post(
        stack.url + "/v1/chat/completions",
        content=json.dumps(BODY),
        headers={"content-type": "text/plain"},
    )
    assert response.status_code == 415
    error = response.json()["error"]
    assert error["code"] == "unsupported_media_type" and "application/json" in error["message"]
    assert stack.baseline_log.bodies == []


def test_get_on_a_proxy_endpoint_is_an_openai_405(stack):
    response = httpx.get(stack.url + "/v1/chat/completions")
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_the_proxys_own_errors_carry_openai_codes(tmp_path):
    with gateway_stack(
        tmp_path, candidate_down=True, mode=RolloutMode.CANARY, request_body_max_bytes=1000
    ) as stack:
        too_big = httpx.post(
            stack.url + "/v1/chat/completions", json={**BODY, "pad": "x" * 2000}
        ).json()["error"]
        assert too_big["code"] == "request_too_large"
    with gateway_stack(tmp_path / "b", baseline=SimProfile(failure="hang"), sample_rate=0.0,
                       upstream_timeout_s=0.3) as stack:  # fmt: skip
        with pytest.raises(openai.APIStatusError) as timed_out:
            stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES)
        assert timed_out.value.status_code == 504
        assert timed_out.value.body["code"] == "upstream_timeout"


def test_an_unreachable_route_is_an_openai_502(tmp_path):
    with gateway_stack(tmp_path, sample_rate=0.0) as stack:
        with stack.factory() as session, session.begin():
            from gate.db.models import Route

            session.query(Route).filter_by(name="base").update(
                {"base_url": "http://127.0.0.1:9/v1"}
            )
        assert wait_until(lambda: stack.routing.lookup(ALIAS).baseline.base_url.endswith(":9/v1"))
        with pytest.raises(openai.APIStatusError) as unreachable:
            stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES)
        assert unreachable.value.status_code == 502
        assert unreachable.value.body["code"] == "upstream_unreachable"


def test_a_client_that_did_not_ask_for_usage_sees_no_usage_field(tmp_path):
    # An OpenAI-style upstream puts "usage": null in every chunk once usage is asked for,
    # which the gateway does on the client's behalf.
    openai_like = SimProfile(null_usage=True)
    with gateway_stack(tmp_path, baseline=openai_like, candidate=openai_like) as stack:
        with httpx.stream(
            "POST", stack.url + "/v1/chat/completions", json={**BODY, "stream": True}
        ) as response:
            raw = b"".join(response.iter_raw())
        assert raw.count(b"data: {") == 32 and b'"usage"' not in raw
        asked = httpx.post(
            stack.url + "/v1/chat/completions",
            json={**BODY, "stream": True, "stream_options": {"include_usage": True}},
        ).content
        assert asked.count(b'"usage":null') == 32 and b'"completion_tokens":32' in asked


def test_the_stored_request_body_is_what_the_client_sent(stack):
    list(stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES, stream=True))
    assert wait_until(lambda: len(stack.pair_spans()) == 1)
    (pair,) = stack.pair_spans()
    stored = json.loads(pair.attributes[A.REQUEST_BODY])
    assert stored == {"model": ALIAS, "messages": MESSAGES, "stream": True}
    # Upstream still got the usage it needs for its token counts.
    assert stack.baseline_log.bodies[0]["stream_options"] == {"include_usage": True}
