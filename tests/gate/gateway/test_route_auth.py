"""Routes that require a bearer token: the gateway sends the route's credential, read
from an environment variable or a mounted secret file, and shows it nowhere."""

from __future__ import annotations

import json
import logging

import httpx
import openai
import pytest
from pydantic import ValidationError
from sqlalchemy import select, text

from gate.api.schemas import RouteOut
from gate.db.enums import RolloutMode
from gate.db.models import Route
from gate.engines.sim import SimProfile
from gate.rollouts.schemas import RouteAuth
from gate.telemetry import attributes as A
from tests.gate.gateway.conftest import ALIAS, gateway_stack
from tests.gate.gateway.test_proxy import MESSAGES, wait_until

SECRET = "s3cret-route-key"


def everything_recorded(stack) -> str:
    spans = stack.exporter.get_finished_spans()
    with stack.factory() as session:
        rows = session.execute(text("SELECT * FROM routes")).all()
        shown = [
            RouteOut.model_validate(r).model_dump_json() for r in session.scalars(select(Route))
        ]
    return json.dumps([dict(s.attributes or {}) for s in spans]) + repr(rows) + "".join(shown)


def test_a_route_requiring_a_bearer_token_from_an_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECGATE_ROUTE_KEY", SECRET)
    auth = {"source": "env:SPECGATE_ROUTE_KEY"}
    with gateway_stack(tmp_path, auth=auth, require_token=SECRET) as stack:
        answer = stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES)
        assert answer.choices[0].message.content
        chunks = list(
            stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES, stream=True)
        )
        assert len(chunks) == 32
        assert wait_until(lambda: len(stack.spans("candidate")) == 2)
        assert {s.attributes["specgate.status"] for s in stack.spans()} == {"ok"}
        recorded = everything_recorded(stack)
        assert SECRET not in recorded and "env:SPECGATE_ROUTE_KEY" in recorded


def test_a_mounted_secret_file_is_read_again_when_it_rotates(tmp_path):
    (tmp_path / "secrets").mkdir()
    secret = tmp_path / "secrets" / "token"
    secret.write_text("old-key\n")  # a Kubernetes Secret file often ends in a newline
    auth = {"source": f"file:{secret}"}
    with gateway_stack(
        tmp_path, auth=auth, require_token="new-key", sample_rate=0.0, state_poll_interval_s=0.1
    ) as stack:
        # The route refuses the old key: the client is told the gateway's credential
        # failed, not that its own key is wrong.
        try:
            stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES)
            raise AssertionError("the refused call succeeded")
        except openai.APIStatusError as exc:
            assert exc.status_code == 502 and "credential" in exc.message
        secret.write_text("new-key\n")

        def answers() -> bool:
            try:
                return bool(stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES))
            except openai.APIStatusError:
                return False

        assert wait_until(answers)
        assert "new-key" not in everything_recorded(stack)


def test_a_canary_candidate_that_refuses_the_credential_falls_back(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECGATE_ROUTE_KEY", "wrong")
    with gateway_stack(
        tmp_path,
        mode=RolloutMode.CANARY,
        auth={"source": "env:SPECGATE_ROUTE_KEY"},
        require_token=SECRET,
        candidate=SimProfile(),
    ) as stack:
        # Both routes refuse; the candidate's refusal is its failure, not the client's.
        response = httpx.post(
            stack.url + "/v1/chat/completions", json={"model": ALIAS, "messages": MESSAGES}
        )
        assert response.status_code == 502
        (cand,) = stack.spans("candidate")
        assert cand.attributes["specgate.status"] == "fallback"


def test_a_missing_credential_is_logged_without_a_value(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("SPECGATE_ROUTE_KEY_MISSING", raising=False)
    caplog.set_level(logging.WARNING)
    with gateway_stack(
        tmp_path, auth={"source": "env:SPECGATE_ROUTE_KEY_MISSING"}, require_token=SECRET
    ) as stack:
        response = httpx.post(
            stack.url + "/v1/chat/completions", json={"model": ALIAS, "messages": MESSAGES}
        )
        assert response.status_code == 502
    assert "route.credential_unavailable route=base" in caplog.text
    assert "SPECGATE_ROUTE_KEY_MISSING is not set" in caplog.text


def test_a_credential_may_name_only_route_secrets(tmp_path, monkeypatch, caplog):
    # Whoever registers a route picks where its token goes: the process's own secrets and
    # files outside the route secrets folder are never read, let alone sent.
    with pytest.raises(ValidationError):
        RouteAuth(source="env:SPECGATE_SECRET_KEY")
    outside = tmp_path / "not-a-route-secret"
    outside.write_text("database password")
    (tmp_path / "secrets").mkdir()
    caplog.set_level(logging.WARNING)
    with gateway_stack(tmp_path, auth={"source": f"file:{outside}"}, sample_rate=0.0) as stack:
        stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES)
        assert "authorization" not in stack.baseline_log.headers[0]
    assert "outside the route secrets folder" in caplog.text
    assert "database password" not in caplog.text


def test_a_secret_outside_latin1_never_shows_in_the_error(tmp_path, monkeypatch):
    # The character the header codec chokes on is part of the secret: the message names
    # only the header.
    monkeypatch.setenv("SPECGATE_ROUTE_KEY", "sk-ab\u2019cdef")
    auth = {"source": "env:SPECGATE_ROUTE_KEY"}
    with gateway_stack(tmp_path, auth=auth, sample_rate=0.0) as stack:
        with pytest.raises(openai.APIStatusError) as refused:
            stack.client().chat.completions.create(model=ALIAS, messages=MESSAGES)
        assert wait_until(lambda: len(stack.spans("baseline")) == 1)
        (base,) = stack.spans("baseline")
        assert (
            base.attributes[A.ERROR] == "header 'Authorization' holds a character outside Latin-1"
        )
        shown = everything_recorded(stack) + refused.value.response.text
    assert "\u2019" not in shown and "sk-ab" not in shown


@pytest.mark.parametrize(
    "header",
    ["Host", "content-length", "Transfer-Encoding", "Connection", "Content-Type", "traceparent"],
)
def test_a_credential_header_the_gateway_sets_itself_is_refused(header):
    with pytest.raises(ValidationError, match="the gateway sets itself"):
        RouteAuth(header=header, source="env:SPECGATE_ROUTE_KEY")
