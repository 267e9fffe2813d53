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
from tests.waits import wait_until

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

    halfway, cut = threading.Event(), threading.Event()

    def stream() -> None:
        for number, batch in enumerate(batches):
            if number == len(batches) // 2:
                halfway.set()
                cut.wait(30)  # the second half is sent while the database is away
            pipeline.writer.enqueue(batch)
            if number % 10 == 0:
                pipeline.writer.enqueue(batches[number // 2])  # a retried export: duplicates
            time.sleep(0.01)

    def counted(name: str) -> float:
        return registry.get_sample_value(f"specgate_collector_{name}_total") or 0.0

    sender = threading.Thread(target=stream)
    sender.start()
    assert halfway.wait(30) and wait_until(lambda: counted("spans_written") > 0)
    proxy.cut()
    cut.set()
    assert wait_until(lambda: not pipeline.writer.database_up and counted("spans_spooled") > 0)
    proxy.restore()
    sender.join()
    assert pipeline.writer.flush(30)
    assert wait_until(lambda: not pipeline.writer.spool.segments)
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
