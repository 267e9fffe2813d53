"""The lean OTLP encoder writes exactly what the SDK's encoder writes, and exports it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
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

from gate.telemetry import otlp_encode
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


def test_the_lean_encoding_decodes_to_the_sdk_s_message():
    spans = varied_spans()
    decoded = ExportTraceServiceRequest.FromString(SpanEncoder().encode(spans))
    assert decoded == encode_spans(spans)


def test_the_field_tags_are_the_generated_classes_field_numbers_and_wire_types():
    # Written out by hand from opentelemetry/proto/trace/v1/trace.proto and common.proto:
    # (field number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
    expected = {
        "SPAN_TRACE_ID": bytes([1 << 3 | 2]),
        "SPAN_START": bytes([7 << 3 | 1]),
        "SPAN_KIND": bytes([6 << 3 | 0]),
        "SPAN_FLAGS": bytes([(16 << 3 | 5) & 0x7F | 0x80, (16 << 3 | 5) >> 7]),  # two bytes
        "LINK_FLAGS": bytes([6 << 3 | 5]),
        "ANY_DOUBLE": bytes([4 << 3 | 1]),
        "ANY_BYTES": bytes([7 << 3 | 2]),
        "STATUS_CODE": bytes([3 << 3 | 0]),
    }
    assert {name: getattr(otlp_encode, name) for name in expected} == expected


def test_the_sdk_s_private_parts_are_where_the_encoder_reads_them():
    """Fails loudly when an OpenTelemetry release moves what the lean exporter reads (see
    SDK_PRIVATE); the exporter would still work, through the SDK's slower encoder."""
    span = next(span for span in varied_spans() if span.events and span.attributes)
    # Events', links', scopes' and resources' attributes are BoundedAttributes (a span's
    # own come wrapped in a read-only proxy, iterated as a mapping).
    attributes = span.events[0].attributes
    assert isinstance(attributes, BoundedAttributes)
    behind = attributes._dict
    assert type(behind) is dict and behind == dict(attributes) and behind
    exporter = LeanOTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces", timeout=1)
    assert exporter._shutdown is False
    assert exporter._max_request_size == otlp_encode.MAX_REQUEST_BYTES
    assert callable(exporter._client.export)
    assert exporter.lean
    named = {
        f"{BoundedAttributes.__module__}.{BoundedAttributes.__qualname__}": attributes,
        f"{OTLPSpanExporter.__module__}.{OTLPSpanExporter.__qualname__}": exporter,
    }
    assert set(otlp_encode.SDK_PRIVATE) == set(named)
    for owner, names in otlp_encode.SDK_PRIVATE.items():
        for name in names:
            assert hasattr(named[owner], name), f"{owner}.{name} moved: see SDK_PRIVATE"


def test_an_exporter_whose_sdk_internals_moved_says_so(caplog):
    class Moved(LeanOTLPSpanExporter):
        lean = False  # what `lean` answers when `_client` has moved

    with caplog.at_level("WARNING", logger=otlp_encode.__name__):
        LeanOTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces", timeout=1)
        assert "otlp_exporter_internals_moved" not in caplog.text
        Moved(endpoint="http://127.0.0.1:9/v1/traces", timeout=1)
        assert "otlp_exporter_internals_moved" in caplog.text


scalars = st.one_of(
    st.text(max_size=80),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
)
values = st.one_of(
    scalars,
    st.lists(st.text(max_size=8), max_size=4),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4),
    st.lists(st.floats(allow_nan=False), max_size=4),
    st.lists(st.booleans(), max_size=4),
)
attribute_sets = st.dictionaries(st.text(min_size=1, max_size=12), values, max_size=8)


@settings(max_examples=200, deadline=None)
@given(
    span_attributes=st.lists(attribute_sets, min_size=1, max_size=4),
    name=st.text(max_size=20),
    description=st.one_of(st.none(), st.text(max_size=20)),
)
def test_any_attributes_encode_as_the_sdk_encodes_them(span_attributes, name, description):
    provider = TracerProvider(resource=Resource.create({"service.name": "p"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for attributes in span_attributes:
        span = tracer.start_span(name, attributes=attributes)
        span.add_event(name, attributes)
        if description is not None:
            span.set_status(Status(StatusCode.ERROR, description))
        span.end()
    spans = memory.get_finished_spans()
    encoder = SpanEncoder()
    for _ in range(2):  # the second time from the cache of repeated attributes
        encoded = encoder.encode(spans)
        assert encoded == encode_spans(spans).SerializePartialToString()
        assert ExportTraceServiceRequest.FromString(encoded) == encode_spans(spans)
