"""`specgate collect`: its options, and several worker processes behind one port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import typer
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from collectors.spool import Spool
from gate.cli.collect import collect
from gate.db.models import Generation, SpanRecord
from tests.collectors.sdk import record_requests
from tests.collectors.test_end_to_end import count, wait_for
from tests.servers import closed_port


def test_collect_is_a_typer_command_with_host_port_and_token():
    app = typer.Typer()
    app.command("collect")(collect)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["collect", "--help"])
    assert result.exit_code == 0
    for option in ("--host", "--port", "--database-url", "--token"):
        assert option in result.output


def run_collect(
    *args: str, home: Path, env_extra: dict[str, str] | None = None, **popen: object
) -> subprocess.Popen[str]:
    unset = ("SPECGATE_REDIS_URL", "SPECGATE_DATABASE_URL", "SPECGATE_COLLECTOR_WORKERS")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env |= {"SPECGATE_HOME": str(home), "SPECGATE_COLLECTOR_FLUSH_INTERVAL_S": "0.05"}
    env |= env_extra or {}
    command = [sys.executable, "-m", "gate", "collect", *args]
    return subprocess.Popen(command, env=env, text=True, **popen)  # type: ignore[call-overload]


@pytest.mark.postgres
def test_two_workers_store_every_span_once_each_with_its_own_spool(
    pg_url, pg_engine, pg_ids, tmp_path
):
    port = closed_port()
    args = ("--port", str(port), "--database-url", pg_url, "--workers", "2")
    collector = run_collect(*args, home=tmp_path, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90  # two spawned workers start slowly on a loaded host
        while not ready(base):
            assert collector.poll() is None and time.monotonic() < deadline, "no start"
            time.sleep(0.1)
        spans = record_requests(pg_ids, 40)
        # Twelve exporters, twelve connections: the workers share the listening socket.
        for index in range(12):
            exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces")
            assert exporter.export(spans[index * 10 : index * 10 + 10]) is SpanExportResult.SUCCESS
            assert exporter.export(spans[:3]) is SpanExportResult.SUCCESS  # a retry
            exporter.shutdown()
        assert wait_for(pg_engine, SpanRecord, 120) == 120
        # Whichever worker answers, /metrics adds up every worker's counters.
        deadline = time.monotonic() + 10
        while (written := metric(base, "spans_written_total")) < 120:
            assert time.monotonic() < deadline, written
            time.sleep(0.1)
        assert metric(base, "spans_duplicate_total") == 36
        # Gauges too: every worker is up (the lowest of them), nothing left queued.
        assert metric(base, "database_up") == 1.0 and metric(base, "queue_depth") == 0.0
        # Each worker listens on its own socket: new connections reach both of them.
        answered: set[int] = set()
        while len(answered) < 2:
            assert time.monotonic() < deadline + 30, f"only {answered} answered"
            answered.add(httpx.get(f"{base}/healthz").json()["pid"])
        assert collector.pid not in answered
        # Both workers hold a spool folder of their own while they run.
        held = Spool.claim(tmp_path / "spool", max_bytes=1)
        assert held.folder == tmp_path / "spool" / "writer-2"
        held.release()
    finally:
        collector.terminate()
        _, stderr = collector.communicate(timeout=60)
    assert collector.returncode == 0, stderr[-2000:]
    assert count(pg_engine, SpanRecord) == 120 and count(pg_engine, Generation) == 80
    # Stopped workers let their folders go.
    assert Spool.claim(tmp_path / "spool", max_bytes=1).folder == tmp_path / "spool"


def test_several_workers_need_postgres_and_a_free_port(tmp_path, pg_url):
    collector = run_collect("--workers", "2", home=tmp_path, stderr=subprocess.PIPE)
    try:
        _, stderr = collector.communicate(timeout=60)
    finally:
        collector.kill()
    assert collector.returncode != 0 and "needs Postgres" in stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        args = ("--workers", "2", "--port", port, "--database-url", pg_url)
        collector = run_collect(*args, home=tmp_path, stderr=subprocess.PIPE)
        try:
            _, stderr = collector.communicate(timeout=60)
        finally:
            collector.kill()
    assert collector.returncode != 0 and f"cannot listen on 127.0.0.1:{port}" in stderr


def ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def metric(base: str, name: str) -> float:
    for family in text_string_to_metric_families(httpx.get(f"{base}/metrics").text):
        for sample in family.samples:
            if sample.name == f"specgate_collector_{name}":
                return sample.value
    return 0.0
