"""Done-when: spans sent by the real OTel OTLP/HTTP exporter land in Postgres, exactly once."""

from __future__ import annotations

import time

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, func, select

from collectors.app import create_app
from gate.db.models import Generation, Pair, SpanRecord
from gate.settings import load_settings
from tests.collectors.sdk import record_requests
from tests.servers import serving as serve

pytestmark = pytest.mark.postgres


def count(engine: Engine, model: type) -> int:
    with engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(model)).scalar_one()


def wait_for(engine: Engine, model: type, expected: int, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while (found := count(engine, model)) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_sdk_exporter_spans_land_in_postgres_once(pg_url, pg_engine, pg_ids, tmp_path):
    settings = load_settings(database_url=pg_url, home=tmp_path)
    collector = load_settings(collector_flush_interval_s=0.05)
    landed: list[tuple[list[int], list]] = []
    registry = CollectorRegistry()
    app = create_app(
        settings, collector, on_landed=lambda g, p: landed.append((g, p)), registry=registry
    )
    spans = record_requests(pg_ids, 20)
    with serve(app) as base_url:
        exporter = OTLPSpanExporter(endpoint=f"{base_url}/v1/traces")
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        assert wait_for(pg_engine, SpanRecord, 60) == 60
        # An exporter retry sends the same spans again: nothing is stored twice.
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        assert exporter.export(spans[:7]) is SpanExportResult.SUCCESS
        assert app.state.pipeline.writer.flush(10)
        exporter.shutdown()
    assert count(pg_engine, SpanRecord) == 60
    assert count(pg_engine, Generation) == 40
    assert count(pg_engine, Pair) == 20
    assert sum(len(generations) for generations, _ in landed) == 40
    assert registry.get_sample_value("specgate_collector_spans_written_total") == 60
    assert registry.get_sample_value("specgate_collector_spans_duplicate_total") == 67


def test_the_collector_exposes_metrics_and_health(pg_url, tmp_path):
    app = create_app(load_settings(database_url=pg_url, home=tmp_path))
    with serve(app) as base_url:
        health = httpx.get(f"{base_url}/healthz").json()
        text = httpx.get(f"{base_url}/metrics").text
    assert health["status"] == "ok" and health["queue_depth"] == 0
    assert "specgate_collector_spans_written_total" in text
    assert "specgate_collector_queue_depth" in text
