"""OTLP protobuf decoding: ids as hex, UTC times, typed attributes, invalid spans rejected."""

from __future__ import annotations

import base64
import json
from datetime import UTC

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collectors.otlp import MalformedPayload, decode_json, decode_protobuf
from collectors.spans import to_unix_nano
from gate.telemetry import attributes as a
from tests.collectors.factory import Ids
from tests.collectors.sdk import record_requests
from tests.collectors.test_round_trip import record

IDS = Ids(rollout=1, baseline_route=1, candidate_route=2)


def test_sdk_spans_decode_to_rows():
    spans = record_requests(IDS, 1)
    decoded = decode_protobuf(encode_spans(spans).SerializeToString())
    assert decoded.rejected == 0 and len(decoded.rows) == 3
    by_id = {row.span_id: row for row in decoded.rows}
    for span in spans:
        row = by_id[f"{span.context.span_id:016x}"]
        assert row.trace_id == f"{span.context.trace_id:032x}"
        assert row.start_time.tzinfo is UTC
        # The column keeps microseconds; the nanoseconds are in `extra`.
        assert to_unix_nano(row.start_time) == span.start_time // 1000 * 1000
        assert row.extra.get("start_time_unix_nano", span.start_time) == span.start_time
        assert row.resource["service.name"] == row.service == "specgate-gateway"
    route = next(row for row in decoded.rows if row.name == "chat llama")
    assert route.attributes[a.GEN_AI_RESPONSE_FINISH_REASONS] == ["stop"]
    assert route.attributes[a.ROLLOUT_ID] == 1 and route.attributes[a.STREAM] is True
    assert route.parent_span_id in by_id and route.kind == 3


def test_spans_with_invalid_ids_are_rejected_one_by_one():
    request = encode_spans(record_requests(IDS, 1))
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].trace_id = b"\x00" * 16
    spans[1].span_id = b"\x01\x02"
    decoded = decode_protobuf(request.SerializeToString())
    assert decoded.rejected == 2 and len(decoded.rows) == 1 and "invalid" in decoded.error


def test_garbage_is_refused_whole():
    with pytest.raises(MalformedPayload):
        decode_protobuf(b"\x0a\xff\xff\xff")
    assert decode_protobuf(ExportTraceServiceRequest().SerializeToString()).rows == []


def hex_ids(document):
    """Turn protobuf JSON's base64 ids into OTLP/JSON's hex ids, everywhere in `document`."""
    if isinstance(document, list):
        return [hex_ids(item) for item in document]
    if not isinstance(document, dict):
        return document
    ids = ("traceId", "spanId", "parentSpanId")
    return {
        key: base64.b64decode(value).hex() if key in ids else hex_ids(value)
        for key, value in document.items()
    }


def test_json_and_protobuf_keep_the_same_scope_events_links_and_flags():
    request = encode_spans(record())
    linked = [span for span in request.resource_spans[0].scope_spans[0].spans if span.links]
    linked[0].links[0].trace_state = "l=1"  # the SDK's encoder leaves it out
    from_protobuf = decode_protobuf(request.SerializeToString())
    document = hex_ids(json_format.MessageToDict(request))
    from_json = decode_json(json.dumps(document).encode())
    assert [row.extra for row in from_json.rows] == [row.extra for row in from_protobuf.rows]
    chat = next(row for row in from_json.rows if row.name == "chat llama")
    assert chat.extra["links"][0]["trace_state"] == "l=1"
    assert [event["name"] for event in chat.extra["events"]] == [
        "gen_ai.content.prompt",
        "exception",
    ]
    assert chat.extra["scope"]["version"] == "1.2.3" and chat.extra["flags"] == 0x300
