"""Done-when: an OTLP success means durable; without room the sender hears 503 and retries."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, select
from sqlalchemy.engine import make_url

from collectors.app import create_app
from collectors.settings import load_collector_settings
from gate.db.models import SpanRecord
from gate.settings import load_settings
from tests.collectors.sdk import record_requests
from tests.collectors.test_collect_command import ready, run_collect
from tests.servers import TcpProxy, closed_port, serving

pytestmark = pytest.mark.postgres
PROTOBUF = {"Content-Type": "application/x-protobuf"}


def stored_keys(engine: Engine) -> set[tuple[str, str]]:
    with engine.connect() as connection:
        return set(connection.execute(select(SpanRecord.trace_id, SpanRecord.span_id)).all())


def keys_of(spans) -> set[tuple[str, str]]:
    return {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in spans}


def wait_until_stored(engine: Engine, wanted: set, timeout: float = 60.0) -> set:
    deadline = time.monotonic() + timeout
    while (missing := wanted - stored_keys(engine)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return missing


def start_collector(port: int, pg_url: str, home, env: dict[str, str]) -> subprocess.Popen[str]:
    args = ("--port", str(port), "--database-url", pg_url)
    collector = run_collect(*args, home=home, env_extra=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90  # a loaded host starts a process slowly
    while not ready(f"http://127.0.0.1:{port}"):
        assert collector.poll() is None and time.monotonic() < deadline, "no start"
        time.sleep(0.05)
    return collector


def test_spans_acknowledged_before_a_sigkill_are_in_postgres_after_restart(
    pg_url, pg_engine, pg_ids, tmp_path
):
    port = closed_port()
    # Large batches and a long linger: acknowledged-on-receipt spans would sit in memory.
    env = {
        "SPECGATE_COLLECTOR_BATCH_MAX_SPANS": "100000",
        "SPECGATE_COLLECTOR_FLUSH_INTERVAL_S": "5",
    }
    collector = start_collector(port, pg_url, tmp_path, env)
    acknowledged: set[tuple[str, str]] = set()
    lock, stop = threading.Lock(), threading.Event()

    def export() -> None:  # one exporter: one export in flight, as the SDK's processor
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=2)
        while not stop.is_set():
            spans = record_requests(pg_ids, 10)
            if exporter.export(spans) is SpanExportResult.SUCCESS:
                with lock:
                    acknowledged.update(keys_of(spans))
        exporter.shutdown()

    exporters = [threading.Thread(target=export) for _ in range(4)]
    for thread in exporters:
        thread.start()
    deadline = time.monotonic() + 60
    try:
        # A burst; the kill comes while the other exporters' requests are in flight.
        while len(acknowledged) < 600:
            assert time.monotonic() < deadline and collector.poll() is None
            time.sleep(0.01)
    finally:
        collector.send_signal(signal.SIGKILL)
        collector.wait(30)
        with lock:
            answered = set(acknowledged)
        stop.set()
        for thread in exporters:
            thread.join(30)
    restarted = start_collector(port, pg_url, tmp_path, {})  # replays what was spooled
    try:
        assert wait_until_stored(pg_engine, answered) == set()
    finally:
        restarted.terminate()
        restarted.wait(60)


def test_with_the_spool_full_in_an_outage_senders_get_503_and_no_success_is_lost(
    pg_url, pg_engine, pg_ids, tmp_path
):
    url = make_url(pg_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    collector = load_collector_settings(
        collector_spool_max_bytes=60_000,
        collector_retry_initial_s=0.05,
        collector_retry_max_s=0.2,
        collector_retry_after_s=2,
    )
    registry = CollectorRegistry()
    app = create_app(
        load_settings(database_url=proxied, home=tmp_path), collector, registry=registry
    )
    acknowledged: set[tuple[str, str]] = set()
    refused: list[httpx.Response] = []
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        proxy.cut()
        for _ in range(40):
            spans = record_requests(pg_ids, 5)
            body = encode_spans(spans).SerializeToString()
            response = client.post("/v1/traces", content=body, headers=PROTOBUF)
            if response.status_code == 200:
                acknowledged |= keys_of(spans)
            else:
                refused.append(response)
        assert acknowledged, "nothing was spooled"
        assert refused, "a full spool never refused anything"
        assert {(r.status_code, r.headers.get("retry-after")) for r in refused} == {(503, "2")}
        proxy.restore()
        assert wait_until_stored(pg_engine, acknowledged) == set()
    proxy.close()
    assert registry.get_sample_value("specgate_collector_spans_dropped_total") == 0
    assert registry.get_sample_value("specgate_collector_spans_refused_total") == 15 * len(refused)
