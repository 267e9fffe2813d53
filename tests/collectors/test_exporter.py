"""The in-process span exporter: the embedded default writes SDK spans into SQLite."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry
from sqlalchemy import select
from sqlalchemy.orm import Session

from collectors.pipeline import open_pipeline
from gate.db.models import Generation, SpanRecord
from gate.settings import load_settings
from tests.collectors.sdk import RESOURCE, record_requests


def test_the_embedded_exporter_feeds_the_same_sink(sqlite_url, sqlite_ids, sqlite_engine, tmp_path):
    pipeline = open_pipeline(
        load_settings(database_url=sqlite_url, home=tmp_path),
        load_settings(collector_flush_interval_s=0.02),
        registry=CollectorRegistry(),
    )
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(BatchSpanProcessor(pipeline.exporter()))
    tracer = provider.get_tracer("test")
    with (
        tracer.start_as_current_span("outer", kind=SpanKind.SERVER) as outer,
        tracer.start_as_current_span("inner", attributes={"tags": ("a", "b"), "n": 1.5}) as inner,
    ):
        inner.set_status(StatusCode.ERROR, "bad")
    spans = record_requests(sqlite_ids, 2)
    assert pipeline.exporter().export(spans).name == "SUCCESS"
    assert provider.force_flush()
    provider.shutdown()
    pipeline.close()

    with Session(sqlite_engine) as session:
        stored = session.scalars(select(SpanRecord)).all()
        generations = session.scalars(select(Generation)).all()
    assert len(stored) == 8 and len(generations) == 4
    rows = {row.name: row for row in stored}
    inner_row = rows["inner"]
    assert inner_row.parent_span_id == f"{outer.get_span_context().span_id:016x}"
    assert inner_row.attributes == {"tags": ["a", "b"], "n": 1.5}
    assert (inner_row.kind, rows["outer"].kind) == (1, 2)  # OTLP numbering
    assert (inner_row.status_code, inner_row.status_message) == (2, "bad")
    assert inner_row.service == "specgate-gateway" and inner_row.start_time.tzinfo is not None
