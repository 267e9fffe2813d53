"""Done-when: a span with events, links, scope, trace state and flags comes back whole."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from sqlalchemy import Engine, select

from collectors.app import create_app
from collectors.exporter import SinkSpanExporter, plain
from collectors.spans import to_unix_nano
from gate.db.models import SpanRecord
from gate.settings import load_settings
from tests.collectors.sdk import RESOURCE
from tests.servers import serving

pytestmark = pytest.mark.postgres
REMOTE = SpanContext(
    trace_id=0x5B8EFFF798038103D269B633813FC60C,
    span_id=0xEEE19B7EC3C1B173,
    is_remote=True,
    trace_flags=TraceFlags(TraceFlags.SAMPLED),
    trace_state=TraceState([("vendor", "abc"), ("other", "x-1")]),
)
LINKED = SpanContext(0x1234, 0x5678, is_remote=False, trace_state=TraceState([("l", "1")]))


def record() -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("specgate.tests", "1.2.3", attributes={"scope.key": "v"})
    parent = trace.set_span_in_context(trace.NonRecordingSpan(REMOTE))
    links = [Link(LINKED, {"link.why": "retry of", "n": 2})]
    with tracer.start_as_current_span(
        "chat llama", context=parent, kind=SpanKind.CLIENT, links=links, attributes={"a": 1.5}
    ) as span:
        span.add_event("gen_ai.content.prompt", {"gen_ai.prompt": "hi", "big": 1e16})
        try:
            raise ValueError("upstream said no")
        except ValueError as exc:
            span.record_exception(exc)
        with tracer.start_as_current_span("inner"):
            pass
    provider.shutdown()
    return list(memory.get_finished_spans())


def stored(engine: Engine, span: ReadableSpan) -> SpanRecord:
    with engine.connect() as connection:
        query = select(SpanRecord).where(SpanRecord.span_id == f"{span.context.span_id:016x}")
        return connection.execute(query).one()


def nanos(row: SpanRecord, which: str) -> int:
    column = row.start_time if which == "start" else row.end_time
    return (row.extra or {}).get(f"{which}_time_unix_nano", to_unix_nano(column))


# Its spans are committed: truncated afterwards, or they count in later tests' totals.
@pytest.mark.usefixtures("pg_committing")
def test_sdk_spans_round_trip_through_postgres_field_by_field(pg_url, pg_engine, tmp_path):
    spans = record()
    app = create_app(load_settings(database_url=pg_url, home=tmp_path), load_settings())
    with serving(app) as base:
        exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces")
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
    in_process = SinkSpanExporter(lambda rows: 0)
    for span in spans:
        row = stored(pg_engine, span)
        assert (row.trace_id, row.span_id) == (
            f"{span.context.trace_id:032x}",
            f"{span.context.span_id:016x}",
        )
        assert row.parent_span_id == f"{span.parent.span_id:016x}"
        assert (row.name, row.kind) == (span.name, span.kind.value + 1)
        assert (nanos(row, "start"), nanos(row, "end")) == (span.start_time, span.end_time)
        assert row.status_code == span.status.status_code.value
        assert row.attributes == plain(span.attributes) and row.resource == plain(
            span.resource.attributes
        )
        extra = row.extra
        scope = span.instrumentation_scope
        assert extra["scope"] == {
            "name": scope.name,
            "version": scope.version,
            "attributes": dict(scope.attributes),
        }
        assert extra["trace_state"] == "vendor=abc,other=x-1"
        assert extra["flags"] == 0x300 if span.parent.is_remote else 0x100
        events = [
            (e["name"], e["time_unix_nano"], e.get("attributes")) for e in extra.get("events", [])
        ]
        assert events == [(e.name, e.timestamp, plain(e.attributes)) for e in span.events]
        links = [(k["trace_id"], k["span_id"], k["attributes"]) for k in extra.get("links", [])]
        assert links == [
            (f"{k.context.trace_id:032x}", f"{k.context.span_id:016x}", plain(k.attributes))
            for k in span.links
        ]
        # The embedded exporter keeps the same fields, and a link's trace state, which the
        # SDK's OTLP encoder does not send.
        direct = in_process.row(span).extra
        for link in direct.get("links", []):
            assert link.pop("trace_state") == "l=1"
        assert direct == extra
    chat = next(span for span in spans if span.name == "chat llama")
    exception = stored(pg_engine, chat).extra["events"][1]
    assert exception["name"] == "exception"
    assert "upstream said no" in exception["attributes"]["exception.stacktrace"]
    assert type(stored(pg_engine, chat).extra["events"][0]["attributes"]["big"]) is float
