"""The OTLP/HTTP receiver: formats, gzip, limits, auth, partial success, clear 4xx."""

from __future__ import annotations

import gzip
import json

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from collectors.receipt import Receipt
from collectors.receiver import Acknowledge, create_router
from tests.collectors.factory import Ids
from tests.collectors.sdk import record_requests

PROTOBUF = {"Content-Type": "application/x-protobuf"}
IDS = Ids(rollout=1, baseline_route=1, candidate_route=2)


class Sink:
    """Settles every span at once: `fail` of them refused by the database, `refuse` for room."""

    def __init__(self, fail: int = 0, refuse: int = 0) -> None:
        self.rows: list = []
        self.fail, self.refuse = fail, refuse

    async def __call__(self, rows, on_settled) -> Receipt:
        self.rows.extend(rows)
        receipt = Receipt(len(rows), on_settled=on_settled)
        receipt.fail(self.fail, "refused by the database")
        receipt.refuse(self.refuse, "collector overloaded: queue and spool are full")
        receipt.durable(len(rows) - self.fail - self.refuse)
        return receipt


def client(sink, **options) -> TestClient:
    app = FastAPI()
    app.include_router(
        create_router(submit=sink, max_body_bytes=options.pop("limit", 1 << 20), **options)
    )
    return TestClient(app)


@pytest.fixture(scope="module")
def body() -> bytes:
    return encode_spans(record_requests(IDS, 3)).SerializeToString()


def test_protobuf_spans_are_decoded_and_enqueued(body):
    sink = Sink()
    response = client(sink).post("/v1/traces", content=body, headers=PROTOBUF)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-protobuf"
    reply = ExportTraceServiceResponse.FromString(response.content)
    assert not reply.HasField("partial_success")
    assert len(sink.rows) == 9 and {row.service for row in sink.rows} == {"specgate-gateway"}
    assert {row.kind for row in sink.rows} == {1, 3}  # OTLP numbering: internal, client


def test_gzip_bodies_are_accepted(body):
    sink = Sink()
    headers = {**PROTOBUF, "Content-Encoding": "gzip"}
    response = client(sink).post("/v1/traces", content=gzip.compress(body), headers=headers)
    assert response.status_code == 200 and len(sink.rows) == 9


def test_every_member_of_a_multi_member_gzip_body_is_read():
    first, second = (encode_spans(record_requests(IDS, n)) for n in (1, 1))
    # Two gzip members whose inflated bytes concatenate into one protobuf message (the
    # repeated resource_spans of both), as `cat a.gz b.gz` gives.
    content = gzip.compress(first.SerializeToString()) + gzip.compress(second.SerializeToString())
    sink = Sink()
    headers = {**PROTOBUF, "Content-Encoding": "gzip"}
    response = client(sink).post("/v1/traces", content=content, headers=headers)
    assert response.status_code == 200 and len(sink.rows) == 6


def test_garbage_after_the_last_gzip_member_is_refused(body):
    sink = Sink()
    headers = {**PROTOBUF, "Content-Encoding": "gzip"}
    content = gzip.compress(body) + b"trailing"
    response = client(sink).post("/v1/traces", content=content, headers=headers)
    assert response.status_code == 400 and b"8 bytes of garbage" in response.content
    assert sink.rows == []


def test_json_bodies_use_hex_ids_and_get_json_replies():
    document = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}}]
                },
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5B8EFFF798038103D269B633813FC60C",
                                "spanId": "EEE19B7EC3C1B174",
                                "parentSpanId": "EEE19B7EC3C1B173",
                                "name": "llm_request",
                                "kind": "SPAN_KIND_SERVER",
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": 1544712661000000000,
                                "attributes": [
                                    {
                                        "key": "gen_ai.usage.prompt_tokens",
                                        "value": {"intValue": "42"},
                                    },
                                    {"key": "gen_ai.latency.e2e", "value": {"doubleValue": 1.5}},
                                ],
                                "status": {"code": 2, "message": "boom"},
                            },
                            {"traceId": "zz", "spanId": "EEE19B7EC3C1B174"},
                        ]
                    }
                ],
            }
        ]
    }
    sink = Sink()
    response = client(sink).post("/v1/traces", json=document)
    assert response.status_code == 200
    assert response.json()["partialSuccess"]["rejectedSpans"] == "1"
    (row,) = sink.rows
    assert (
        row.trace_id == "5b8efff798038103d269b633813fc60c"
        and row.parent_span_id == "eee19b7ec3c1b173"
    )
    assert row.kind == 2 and row.status_code == 2 and row.status_message == "boom"
    assert row.attributes == {"gen_ai.usage.prompt_tokens": 42, "gen_ai.latency.e2e": 1.5}
    assert row.start_time.isoformat() == "2018-12-13T14:51:00+00:00" and row.service == "vllm"


def test_spans_the_database_refuses_alone_are_reported_as_partial_success(body):
    response = client(Sink(fail=4)).post("/v1/traces", content=body, headers=PROTOBUF)
    reply = ExportTraceServiceResponse.FromString(response.content)
    assert response.status_code == 200 and reply.partial_success.rejected_spans == 4
    assert "refused by the database" in reply.partial_success.error_message


def test_spans_without_room_get_a_503_with_retry_after(body):
    terms = Acknowledge(retry_after_s=7)
    response = client(Sink(refuse=4), acknowledge=terms).post(
        "/v1/traces", content=body, headers=PROTOBUF
    )
    assert response.status_code == 503 and response.headers["retry-after"] == "7"
    assert b"queue and spool are full" in response.content


def test_a_request_waits_for_its_spans_to_be_durable(body):
    class Never:
        async def __call__(self, rows, on_settled) -> Receipt:
            return Receipt(len(rows), on_settled=on_settled)  # never settled

    terms = Acknowledge(timeout_s=0.2, retry_after_s=1)
    response = client(Never(), acknowledge=terms).post("/v1/traces", content=body, headers=PROTOBUF)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert b"not durable within 0.2 s" in response.content


@pytest.mark.parametrize(
    ("content", "headers", "status", "message"),
    [
        (b"\xff\x00garbage", PROTOBUF, 400, "not a protobuf ExportTraceServiceRequest"),
        (b"{not json", {"Content-Type": "application/json"}, 400, "body is not JSON"),
        (b'{"resourceSpans": 3}', {"Content-Type": "application/json"}, 400, "not a list"),
        (b"x", {"Content-Type": "text/plain"}, 415, "unsupported Content-Type"),
        (b"x", {**PROTOBUF, "Content-Encoding": "br"}, 415, "unsupported Content-Encoding"),
        (b"not gzip", {**PROTOBUF, "Content-Encoding": "gzip"}, 400, "not valid gzip"),
    ],
)
def test_bad_requests_get_a_clear_4xx(content, headers, status, message):
    sink = Sink()
    response = client(sink).post("/v1/traces", content=content, headers=headers)
    assert response.status_code == status and message.encode() in response.content
    assert sink.rows == []


def test_protobuf_errors_are_google_rpc_statuses():
    guarded = client(Sink(), token="s3cret").post("/v1/traces", content=b"", headers=PROTOBUF)
    assert guarded.headers["content-type"] == "application/x-protobuf"
    status = Status.FromString(guarded.content)
    assert (status.code, status.message, list(status.details)) == (
        0,
        "missing or wrong bearer token",
        [],
    )
    encoding = "x" * 200  # a message longer than one length byte holds
    refused = client(Sink()).post(
        "/v1/traces", content=b"x", headers={**PROTOBUF, "Content-Encoding": encoding}
    )
    assert refused.status_code == 415
    message = Status.FromString(refused.content).message
    assert message == f"unsupported Content-Encoding {encoding!r}; use gzip or none"


def test_bodies_over_the_limit_are_refused_even_when_compressed(body):
    sink = Sink()
    limited = client(sink, limit=len(body) - 1)
    assert limited.post("/v1/traces", content=body, headers=PROTOBUF).status_code == 413
    bomb = gzip.compress(b"\x00" * (4 << 20))
    headers = {**PROTOBUF, "Content-Encoding": "gzip"}
    assert client(sink).post("/v1/traces", content=bomb, headers=headers).status_code == 413
    assert sink.rows == []


def test_a_configured_token_is_required(body):
    sink = Sink()
    guarded = client(sink, token="s3cret")
    refused = guarded.post("/v1/traces", content=body, headers=PROTOBUF)
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    wrong = guarded.post(
        "/v1/traces", content=body, headers={**PROTOBUF, "Authorization": "Bearer x"}
    )
    assert wrong.status_code == 401 and sink.rows == []
    ok = guarded.post(
        "/v1/traces", content=body, headers={**PROTOBUF, "Authorization": "Bearer s3cret"}
    )
    assert ok.status_code == 200 and len(sink.rows) == 9
    # The scheme is case-insensitive; the token is not.
    lower = guarded.post(
        "/v1/traces", content=body, headers={**PROTOBUF, "Authorization": "bearer s3cret"}
    )
    assert lower.status_code == 200 and len(sink.rows) == 18
    for wrong in ("bearer S3CRET", "Basic s3cret", "Bearers3cret"):
        response = guarded.post(
            "/v1/traces", content=body, headers={**PROTOBUF, "Authorization": wrong}
        )
        assert response.status_code == 401


def test_json_errors_are_json():
    response = client(Sink()).post(
        "/v1/traces", content=b"[", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400 and json.loads(response.content)["code"] == 400
