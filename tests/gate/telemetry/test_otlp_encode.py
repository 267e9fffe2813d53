"""The lean OTLP encoder writes exactly what the SDK's encoder writes, and exports it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

from gate.telemetry.otlp_encode import LeanOTLPSpanExporter, SpanEncoder
from tests.collectors.factory import Ids
from tests.collectors.sdk import record_requests


def varied_spans() -> list[ReadableSpan]:
    """Spans that use every part of the format: kinds, parents (local and remote), trace
    state, events, links, statuses, every attribute type, two resources and scopes."""
    memory = InMemorySpanExporter()
    spans = []
    for service in ("specgate-gateway", "other"):
        provider = TracerProvider(
            resource=Resource.create({"service.name": service, "host.cores": 2}),
            span_limits=None,
        )
        provider.add_span_processor(SimpleSpanProcessor(memory))
        for scope, version in (("specgate.gateway", None), ("lib", "1.2.3")):
            tracer = provider.get_tracer(scope, version, schema_url="https://x/1.0")
            remote = SpanContext(
                trace_id=0x0AF7651916CD43DD8448EB211C80319C,
                span_id=0xB7AD6B7169203331,
                is_remote=True,
                trace_flags=TraceFlags(1),
                trace_state=TraceState([("vendor", "v1"), ("b", "2")]),
            )
            parent = set_span_in_context(NonRecordingSpan(remote))
            attributes = {
                "s": "text",
                "empty": "",
                "unicode": "naïve — 東京",
                "long": "x" * 300,
                "t": True,
                "f": False,
                "zero": 0,
                "i": 7,
                "neg": -5,
                "big": 2**62,
                "pi": 3.25,
                "nf": -0.0,
                "strs": ["a", "b"],
                "ints": [1, -2, 3],
                "floats": [0.5],
                "bools": [True, False],
                "none_list": [],
            }
            with tracer.start_as_current_span(
                "chat sim", context=parent, kind=SpanKind.CLIENT, attributes=attributes
            ) as span:
                span.add_event("first", {"n": 1})
                span.add_event("", {})
                with tracer.start_as_current_span(
                    "", kind=SpanKind.INTERNAL, links=[Link(remote, {"why": "x"})]
                ) as child:
                    child.set_status(Status(StatusCode.ERROR, "boom"))
                span.set_status(Status(StatusCode.OK))
            for kind in SpanKind:
                tracer.start_span(f"k{kind.value}", kind=kind).end()
        provider.shutdown()
    spans.extend(memory.get_finished_spans())
    return spans


def test_lean_encoding_is_the_sdk_encoding_byte_for_byte():
    spans = varied_spans() + record_requests(Ids(rollout=1, baseline_route=2, candidate_route=3), 3)
    encoder = SpanEncoder()
    expected = encode_spans(spans).SerializePartialToString()
    assert encoder.encode(spans) == expected
    # again, now from the cache of repeated attributes
    assert encoder.encode(spans) == expected
    parsed = ExportTraceServiceRequest.FromString(encoder.encode(spans))
    assert len(parsed.resource_spans) == 2
    assert sum(len(s.spans) for r in parsed.resource_spans for s in r.scope_spans) == len(spans)


def test_a_bool_is_never_taken_from_the_cache_of_an_equal_int():
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for value in (1, True, 0, False, "1"):
        tracer.start_span("s", attributes={"k": value}).end()
    spans = memory.get_finished_spans()
    encoder = SpanEncoder()
    for span in spans:
        assert encoder.encode([span]) == encode_spans([span]).SerializePartialToString()


def test_an_attribute_that_cannot_be_encoded_is_left_out_like_the_sdk_does():
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.get_tracer("t").start_span("s", attributes={"ok": 1, "huge": 2**70}).end()
    (span,) = memory.get_finished_spans()
    encoded = SpanEncoder().encode([span])
    assert encoded == encode_spans([span]).SerializePartialToString()
    (kept,) = ExportTraceServiceRequest.FromString(encoded).resource_spans[0].scope_spans
    assert [a.key for a in kept.spans[0].attributes] == ["ok"]


class Receiver(BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        Receiver.bodies.append(self.rfile.read(int(self.headers["content-length"])))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_exporter_posts_the_lean_encoding_over_otlp_http():
    server = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1/traces"
        exporter = LeanOTLPSpanExporter(endpoint=url, timeout=1)
        assert exporter.lean  # the SDK's internals are the ones this was written for
        spans = varied_spans()
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        assert Receiver.bodies[-1] == encode_spans(spans).SerializePartialToString()
        server.shutdown()
        server.server_close()
        assert exporter.export(spans) is SpanExportResult.FAILURE  # nobody listening
    finally:
        server.shutdown()
