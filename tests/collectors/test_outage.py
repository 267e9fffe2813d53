"""Done-when: the database goes away mid-stream; once it is back every span is stored once."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from collectors.pipeline import open_pipeline
from gate.db.models import Generation, SpanRecord
from gate.settings import load_settings
from tests.collectors.factory import gateway_spans
from tests.servers import TcpProxy

pytestmark = pytest.mark.postgres


def test_spans_survive_a_database_outage_and_land_exactly_once(pg_url, pg_engine, pg_ids, tmp_path):
    url = make_url(pg_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    registry = CollectorRegistry()
    collector = load_settings(
        collector_flush_interval_s=0.02,
        collector_batch_max_spans=40,
        collector_retry_initial_s=0.05,
        collector_retry_max_s=0.2,
    )
    pipeline = open_pipeline(
        load_settings(database_url=proxied, home=tmp_path), collector, registry=registry
    )
    batches = [gateway_spans(pg_ids) + gateway_spans(pg_ids) for _ in range(150)]
    sent = {row.key for batch in batches for row in batch}

    def stream() -> None:
        for number, batch in enumerate(batches):
            pipeline.writer.enqueue(batch)
            if number % 10 == 0:
                pipeline.writer.enqueue(batches[number // 2])  # a retried export: duplicates
            time.sleep(0.01)

    sender = threading.Thread(target=stream)
    sender.start()
    time.sleep(0.4)
    proxy.cut()
    time.sleep(0.8)
    assert not pipeline.writer.database_up
    proxy.restore()
    sender.join()
    assert pipeline.writer.flush(30)
    deadline = time.monotonic() + 30
    while pipeline.writer.spool.segments and time.monotonic() < deadline:
        time.sleep(0.05)
    pipeline.close()
    proxy.close()

    with pg_engine.connect() as connection:
        stored = set(connection.execute(select(SpanRecord.trace_id, SpanRecord.span_id)).all())
        generations = connection.execute(select(func.count()).select_from(Generation)).scalar()
    assert stored == sent
    assert generations == 2 * len(sent) // 4
    assert registry.get_sample_value("specgate_collector_spans_spooled_total") > 0
    assert registry.get_sample_value("specgate_collector_spans_replayed_total") > 0
    assert registry.get_sample_value("specgate_collector_spans_dropped_total") == 0
    assert registry.get_sample_value("specgate_collector_spans_failed_total") == 0
    assert not list(tmp_path.glob("spool/*.spool"))
