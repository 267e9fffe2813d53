"""OTLP protobuf decoding: ids as hex, UTC times, typed attributes, invalid spans rejected."""

from __future__ import annotations

from datetime import UTC

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collectors.otlp import MalformedPayload, decode_protobuf
from gate.telemetry import attributes as a
from tests.collectors.factory import Ids
from tests.collectors.sdk import record_requests

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
        assert row.start_time.timestamp() == pytest.approx(span.start_time / 1e9, abs=1e-6)
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
