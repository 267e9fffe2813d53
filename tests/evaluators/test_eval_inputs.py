"""Evaluators see the whole answer: inputs kept past the display limit, or "not evaluable".

Real processes on Postgres: `specgate serve` (shadow) exports spans to `specgate collect`,
which stores them and runs the schema evaluator. The display capture stays at its 8 kB
default; a 9.6 kB JSON-mode request and a 10 kB JSON answer must still be judged whole.
"""

from __future__ import annotations

import time
from contextlib import ExitStack

import httpx
import orjson
import pytest
from sqlalchemy import select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gate.db.models import Evaluation, Generation, RequestRecord
from gate.rollouts.states import Action
from gate.routing import service as routing
from tests import factories
from tests.gate.api.test_processes import specgate_collect, specgate_serve
from tests.servers import serving

pytestmark = pytest.mark.postgres
SCHEMA = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"type": "object"}}},
    "required": ["items"],
}
# A valid answer of about 10 kB: longer than the 8 kB display capture.
ANSWER = orjson.dumps({"items": [{"id": i, "name": f"part-{i:04d}-fjord"} for i in range(320)]})
PROMPT = "List the parts. " + "Context line about parts and fjords. " * 260  # about 9.6 kB


def json_upstream() -> Starlette:
    """An OpenAI-compatible upstream that answers every chat request with ANSWER."""

    async def chat(request: Request) -> Response:
        await request.body()
        reply = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": ANSWER.decode()},
                }
            ],
            "usage": {"prompt_tokens": 2400, "completion_tokens": 2600, "total_tokens": 5000},
        }
        return Response(orjson.dumps(reply), media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def schema_results(pg_url, pg_committing, **env: str) -> tuple[list[tuple], RequestRecord]:
    """Send one JSON-mode request through the stack; return its schema evaluations."""
    with ExitStack() as stack:
        upstream = stack.enter_context(serving(json_upstream())) + "/v1"
        with pg_committing() as db, db.begin():
            rollout = factories.rollout(
                db,
                name="json",
                base_url=upstream,
                candidate_url=upstream,
                sample_rate=1.0,
                policy={"stages": [100.0]},
            )
            routing.change_state(
                db,
                rollout_id=rollout.id,
                action=Action.START,
                actor="t",
                reason="t",
                publisher=None,
            )
        otlp = stack.enter_context(specgate_collect(pg_url))
        gateway = stack.enter_context(
            specgate_serve(pg_url, otlp_endpoint=otlp, SPECGATE_CONTROL_RATE="0", **env)
        )
        body = {
            "model": "json",
            "temperature": 0,
            "messages": [{"role": "user", "content": PROMPT}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "parts", "schema": SCHEMA},
            },
        }
        assert len(orjson.dumps(body)) > 9_600
        answer = httpx.post(f"{gateway}/v1/chat/completions", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with pg_committing() as db:
                rows = db.execute(
                    select(Generation.cohort, Evaluation.passed, Evaluation.not_evaluable)
                    .join(Evaluation, Evaluation.generation_id == Generation.id)
                    .where(Evaluation.evaluator == "schema")
                    .order_by(Generation.cohort)
                ).all()
                request = db.scalars(select(RequestRecord)).first()
            if len(rows) == 2:
                return [tuple(r) for r in rows], request
            time.sleep(0.2)
        with pg_committing() as db:
            seen = db.execute(select(Generation.cohort, Generation.status, Generation.error)).all()
    raise AssertionError(f"the pair was not evaluated in time; generations: {seen}")


def test_a_long_json_mode_request_and_answer_are_judged_whole(pg_url, pg_committing):
    rows, request = schema_results(pg_url, pg_committing)
    # response_format survived the 9.6 kB prompt, and the 10 kB answer is valid JSON.
    assert request.body["response_format"]["type"] == "json_schema" and not request.truncated
    assert [(passed, reason) for _, passed, reason in rows] == [(True, None), (True, None)]


def test_an_input_still_cut_is_not_evaluable(pg_url, pg_committing):
    rows, request = schema_results(pg_url, pg_committing, SPECGATE_EVAL_INPUT_MAX_CHARS="9000")
    assert request.truncated == ["body"]
    # Neither a pass nor a fail: the schema evaluator could not see the whole request.
    assert [(passed, reason) for _, passed, reason in rows] == [
        (None, "truncated"),
        (None, "truncated"),
    ]
