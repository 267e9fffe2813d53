"""Done-when: an OTLP success means durable; without room the sender hears 503 and retries."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, select
from sqlalchemy.engine import make_url

from collectors.app import create_app
from gate.db.models import SpanRecord
from gate.settings import load_settings
from tests.collectors.sdk import record_requests
from tests.collectors.test_collect_command import ready, run_collect
from tests.servers import TcpProxy, closed_port, serving
from tests.waits import wait_until

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


def healthz(base: str) -> dict:
    try:
        return httpx.get(f"{base}/healthz", timeout=5).json()
    except httpx.HTTPError:
        return {}


class Senders:
    """Exporters posting 10-request bodies in a loop; what was answered 200, what still waits."""

    def __init__(self, base: str, ids, count: int) -> None:
        self.base, self.ids = base, ids
        self.acknowledged: set[tuple[str, str]] = set()
        self.waiting = 0
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.threads = [threading.Thread(target=self._send) for _ in range(count)]
        for thread in self.threads:
            thread.start()

    def _send(self) -> None:
        with httpx.Client(base_url=self.base, timeout=300) as client:
            while not self.stop.is_set():
                spans = record_requests(self.ids, 10)
                body = encode_spans(spans).SerializeToString()
                with self.lock:
                    self.waiting += 1
                try:
                    ok = client.post("/v1/traces", content=body, headers=PROTOBUF).is_success
                except httpx.HTTPError:
                    ok = False
                with self.lock:
                    self.waiting -= 1
                    if ok:
                        self.acknowledged |= keys_of(spans)

    def answered(self) -> set[tuple[str, str]]:
        with self.lock:
            return set(self.acknowledged)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


def test_spans_acknowledged_before_a_sigkill_are_in_postgres_after_restart(
    pg_url, pg_engine, pg_ids, tmp_path
):
    url = make_url(pg_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    port = closed_port()
    base = f"http://127.0.0.1:{port}"
    # A small queue: while the database stalls, the queue fills and the overflow is spooled;
    # a long acknowledgement timeout: queued spans' senders are still waiting at the kill.
    env = {"SPECGATE_COLLECTOR_QUEUE_MAX_SPANS": "30", "SPECGATE_COLLECTOR_ACK_TIMEOUT_S": "300"}
    collector = start_collector(port, proxied, tmp_path, env)
    senders = Senders(base, pg_ids, 12)
    try:
        assert wait_until(lambda: len(senders.answered()) >= 200, 60), "nothing was committed"
        proxy.stall()  # the writers hang in their commits: nothing commits from now on
        before_stall = len(senders.answered())
        # The kill must find spans queued with their senders waiting, and spans acknowledged
        # from the spool during the stall.
        assert wait_until(
            lambda: (
                healthz(base).get("queue_depth", 0) > 0
                and healthz(base).get("spool_segments", 0) > 0
                and senders.waiting > 0
                and len(senders.answered()) > before_stall
            )
        ), f"no spans in flight at the kill: {healthz(base)}, waiting={senders.waiting}"
        collector.send_signal(signal.SIGKILL)
        collector.wait(30)
        answered = senders.answered()
    finally:
        if collector.poll() is None:
            collector.kill()
        proxy.close()  # Postgres rolls back the stalled transactions
        senders.close()
    restarted = start_collector(port, pg_url, tmp_path, {})  # replays what was spooled
    try:
        assert wait_until_stored(pg_engine, answered) == set()
    finally:
        restarted.terminate()
        restarted.wait(60)


def test_spooling_an_overflow_does_not_block_the_event_loop(pg_url, pg_ids, tmp_path):
    registry = CollectorRegistry()
    settings = load_settings(database_url=pg_url, home=tmp_path)
    app = create_app(settings, load_settings(collector_queue_max_spans=5), registry=registry)
    body = encode_spans(record_requests(pg_ids, 10)).SerializeToString()  # more than the queue
    with serving(app) as base, httpx.Client(base_url=base, timeout=60) as client:
        spool = app.state.pipeline.writer.spool
        with ThreadPoolExecutor(1) as pool, spool._lock:  # a writer in a slow fsync holds it
            sent = pool.submit(client.post, "/v1/traces", content=body, headers=PROTOBUF)
            received = "specgate_collector_spans_received_total"
            assert wait_until(lambda: (registry.get_sample_value(received) or 0) > 0)
            # The export waits for the spool; the event loop still answers everyone else.
            assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200
            assert not sent.done()
        assert sent.result(60).status_code == 200


def test_with_the_spool_full_in_an_outage_senders_get_503_and_no_success_is_lost(
    pg_url, pg_engine, pg_ids, tmp_path
):
    url = make_url(pg_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    collector = load_settings(
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
