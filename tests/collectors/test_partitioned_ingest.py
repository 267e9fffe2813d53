"""The collector on time-partitioned spans: every acknowledged span is stored once, and
/metrics counts the rows no partition holds, table by table."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session

from collectors.app import create_app
from gate.db import migrate, online_partition, partitions
from gate.db.engine import make_engine
from gate.db.models import Generation, Pair, RequestRecord, SpanRecord
from gate.settings import load_settings
from tests.collectors.factory import make_rollout
from tests.collectors.sdk import record_requests
from tests.servers import serving as serve

pytestmark = pytest.mark.postgres


# Referrers partitioned first (generations' pair_id, pairs' request_id): their foreign
# keys, cloned on each partition, go at the swap of the table they point at.
@pytest.fixture(params=[("spans",), ("spans", "generations", "pairs", "requests")])
def partitioned_url(empty_pg_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated database whose spans (and, the second time, every table the collector
    writes) are partitioned by the hour."""
    migrate.upgrade(empty_pg_url)
    engine = make_engine(empty_pg_url)
    for table in request.param:
        online_partition.convert(engine, table, period=3600, echo=lambda _line: None)
    engine.dispose()
    yield empty_pg_url


def count(engine: Engine, model: type) -> int:
    with engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(model)).scalar_one()


def partitioned_pairs(engine: Engine) -> bool:
    with engine.connect() as connection:
        return partitions.period_s(connection, "pairs") is not None


def test_sdk_spans_land_once_in_partitioned_spans(partitioned_url, tmp_path):
    engine = make_engine(partitioned_url)
    with Session(engine) as session, session.begin():
        ids = make_rollout(session)
    registry = CollectorRegistry()
    app = create_app(
        load_settings(database_url=partitioned_url, home=tmp_path),
        load_settings(collector_flush_interval_s=0.05),
        registry=registry,
    )
    spans = record_requests(ids, 20)
    with serve(app) as base_url:
        exporter = OTLPSpanExporter(endpoint=f"{base_url}/v1/traces")
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        assert exporter.export(spans) is SpanExportResult.SUCCESS  # a retry: stored once
        assert app.state.pipeline.writer.flush(10)
        exporter.shutdown()
        metrics = httpx.get(f"{base_url}/metrics").text
        with engine.begin() as conn:  # a sender's clock ten days ahead: past every partition
            conn.execute(
                text(
                    "INSERT INTO spans (trace_id, span_id, name, kind, start_time, end_time, "
                    "status_code, attributes, resource, received_at) SELECT trace_id, "
                    "'ffffffffffffffff', name, kind, start_time + interval '10 days', "
                    "end_time, status_code, attributes, resource, received_at FROM spans LIMIT 1"
                )
            )
            # A pair's too, where `pairs` is partitioned (the update moves it to the default).
            one = "(SELECT id FROM pairs LIMIT 1)"
            moved = f"UPDATE pairs SET created_at = created_at + interval '10 days' WHERE id={one}"
            conn.execute(text(moved))
        stray = httpx.get(f"{base_url}/metrics").text
    assert count(engine, SpanRecord) == 61
    assert count(engine, Generation) == 40
    assert count(engine, Pair) == 20
    assert count(engine, RequestRecord) == 20
    assert registry.get_sample_value("specgate_collector_spans_duplicate_total") == 60
    assert 'specgate_collector_default_rows{table="spans"} 0.0' in metrics
    assert 'specgate_collector_default_rows{table="spans"} 1.0' in stray
    pairs = 'specgate_collector_default_rows{table="pairs"} 1.0'
    assert (pairs in stray) == partitioned_pairs(engine)
    engine.dispose()
