"""End-to-end span ingestion: OTLP/HTTP protobuf in -> rows in Postgres, vs row-by-row ORM.

    .venv/bin/python bench/ingest.py --duration 60 --row-by-row-duration 20
    .venv/bin/python bench/ingest.py --compare --exporters 1,4 --duration 30

Creates a throwaway database (built by the migrations) on the server named by
`--admin-url`, starts `collectors.app` under uvicorn in a subprocess (`--collector-workers
N` processes, as `specgate collect --workers N` runs), and sends
gateway-shaped spans (a `specgate.pair` span and two route calls per sampled request,
~25 attributes, ~1.5 KB encoded) in 512-span exports from client threads, re-sending
5% of the exports unchanged as duplicates. The clock stops when every span sent has
been written (or recognised as a duplicate) and committed. Then the same spans go in
row by row through the ORM, one commit per span, for comparison.

`--compare` instead measures, in one run, a collector that answers once spans are
received (the old behaviour, `SPECGATE_COLLECTOR_ACKNOWLEDGE=received`) against one that
answers once they are durable (the default), with each `--exporters` count: each sender
thread keeps one export in flight, as the SDK's BatchSpanProcessor does per exporter.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from ingest_spans import GROUPS_PER_EXPORT, Offsets, fresh, template
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from collectors.normalise import generation_row, pair_rows
from collectors.otlp import decode_protobuf
from gate.db import migrate
from gate.db.enums import RolloutMode, RouteRole
from gate.db.models import Generation, Pair, RequestRecord, Rollout, Route, SpanRecord
from gate.db.rows import SpanRow
from gate.telemetry import attributes as a

DUPLICATE_EVERY = 20  # every 20th export is re-sent unchanged (5% duplicates)
QUEUE_HIGH_WATER = 40_000  # pause senders while the collector's queue is this deep
RECONNECT_EVERY = 20  # exports per sender connection


class Sender:
    """Client threads posting exports; every `duplicate_every`th one repeats an earlier one
    (0: none)."""

    def __init__(self, url: str, body: bytes, offsets: Offsets, duplicate_every: int) -> None:
        self.url, self.body, self.offsets = url, body, offsets
        self.duplicate_every = duplicate_every
        self.spans_per_export = GROUPS_PER_EXPORT * 3
        self.lock = threading.Lock()
        self.unique = self.duplicates = self.exports = self.refused = 0
        self.waits: list[float] = []  # seconds from sending an export to its answer
        self.sent: list[bytes] = []
        self.stop = threading.Event()
        self.paused = threading.Event()

    def run(self) -> None:
        # http.client rather than httpx: the sender shares the machine with the collector.
        target = urlsplit(self.url)
        connection = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
        headers = {"Content-Type": "application/x-protobuf"}
        on_connection = 0
        while not self.stop.is_set():
            if self.paused.is_set():
                time.sleep(0.01)
                continue
            if on_connection == RECONNECT_EVERY:
                # As from many exporters: new connections, which the kernel spreads over
                # the collector's workers (SO_REUSEPORT hashes each connection's addresses).
                connection.close()
                connection = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                on_connection = 0
            on_connection += 1
            with self.lock:
                self.exports += 1
                every = self.duplicate_every
                duplicate = every > 0 and self.exports % every == 0 and bool(self.sent)
                body = random.choice(self.sent) if duplicate else None
            body = body or fresh(self.body, self.offsets)
            sent_at = time.perf_counter()
            while True:  # as the SDK does: a 503 or 429 is sent again after a pause
                connection.request("POST", target.path, body=body, headers=headers)
                response = connection.getresponse()
                response.read()
                if response.status not in (429, 503):
                    break
                with self.lock:
                    self.refused += 1
                time.sleep(0.05)
            if response.status != 200:
                raise RuntimeError(f"collector answered {response.status}")
            with self.lock:
                self.waits.append(time.perf_counter() - sent_at)
                if duplicate:
                    self.duplicates += self.spans_per_export
                else:
                    self.unique += self.spans_per_export
                    self.sent = [*self.sent, body][-50:]
        connection.close()


def cpu_seconds(collector_pid: int) -> dict[str, float]:
    """Return CPU seconds used so far by this client, the collector (the process and its
    workers) and all Postgres processes."""
    ticks = os.sysconf("SC_CLK_TCK")
    used = {"client": 0.0, "collector": 0.0, "postgres": 0.0}
    processes: dict[int, tuple[str, int, float]] = {}  # pid: (name, parent pid, seconds)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        seconds = (int(fields[11]) + int(fields[12])) / ticks
        processes[int(entry.name)] = (
            stat.split("(", 1)[1].rsplit(")", 1)[0],
            int(fields[1]),
            seconds,
        )
    collector = {collector_pid}
    while (
        grown := {pid for pid, (_, parent, _) in processes.items() if parent in collector}
        - collector
    ):
        collector |= grown
    for pid, (name, _, seconds) in processes.items():
        if name == "postgres":
            used["postgres"] += seconds
        elif pid == os.getpid():
            used["client"] += seconds
        elif pid in collector:
            used["collector"] += seconds
    return used


def collector_counts(base: str) -> dict[str, float]:
    """Return the collector's counters and queue depth from its /metrics."""
    target = urlsplit(base)
    connection = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
    connection.request("GET", "/metrics")
    exposition = connection.getresponse().read().decode()
    connection.close()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if not sample.name.endswith(("_created", "_bucket")):
                values[sample.name.removeprefix("specgate_collector_")] = sample.value
    return values


def answer_times(waits: list[float]) -> dict[str, float]:
    """Return the median and 99th percentile of the exports' answer times, in ms."""
    ordered = sorted(waits) or [0.0]
    pick = lambda q: 1000 * ordered[min(int(q * len(ordered)), len(ordered) - 1)]  # noqa: E731
    return {"answer_p50_ms": pick(0.5), "answer_p99_ms": pick(0.99)}


def measure_pipeline(
    base: str, body: bytes, offsets: Offsets, args: argparse.Namespace, collector_pid: int
) -> dict[str, float]:
    """Send for `args.duration` seconds; return counts and end-to-end rates."""
    sender = Sender(f"{base}/v1/traces", body, offsets, args.duplicate_every)
    threads = [threading.Thread(target=sender.run, daemon=True) for _ in range(args.clients)]
    started, cpu_before = time.perf_counter(), cpu_seconds(collector_pid)
    for thread in threads:
        thread.start()
    deepest = 0.0
    while time.perf_counter() - started < args.duration:
        depth = collector_counts(base).get("queue_depth", 0.0)
        deepest = max(deepest, depth)
        (sender.paused.set if depth > QUEUE_HIGH_WATER else sender.paused.clear)()
        time.sleep(0.1)
    sender.stop.set()
    for thread in threads:
        thread.join()
    total = sender.unique + sender.duplicates
    while True:  # the clock stops once every span sent is committed (or known duplicate)
        counts = collector_counts(base)
        if counts.get("spans_written_total", 0) + counts.get("spans_duplicate_total", 0) >= total:
            break
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    cpu = {k: v - cpu_before[k] for k, v in cpu_seconds(collector_pid).items()}
    return {
        **{f"cpu_us_per_span_{k}": 1e6 * v / total for k, v in cpu.items()},
        "elapsed_s": elapsed, "spans": total, "unique": sender.unique,
        "duplicates": sender.duplicates, "spans_per_s": total / elapsed,
        "refused_exports": sender.refused, **answer_times(sender.waits),
        "rows_per_s": sender.unique / elapsed, "deepest_queue": deepest, **counts,
    }  # fmt: skip


def row_by_row(url: str, body: bytes, offsets: Offsets, seconds: float) -> dict[str, float]:
    """Insert the same spans through the ORM, one commit per span, 5% of them duplicates."""
    engine = create_engine(url)
    handled = duplicates = 0
    started = time.perf_counter()
    with Session(engine) as session:
        while time.perf_counter() - started < seconds:
            rows = decode_protobuf(fresh(body, offsets)).rows
            for index, row in enumerate(rows):
                if time.perf_counter() - started >= seconds:
                    break
                again = [rows[index - 10]] if index % DUPLICATE_EVERY == 10 else []
                for one in [row, *again]:  # every 20th span, an earlier one comes again
                    handled += 1
                    duplicates += not insert_one(session, one)
    elapsed = time.perf_counter() - started
    engine.dispose()
    return {"elapsed_s": elapsed, "spans": handled, "duplicates": duplicates,
            "spans_per_s": handled / elapsed}  # fmt: skip


SPAN_FIELDS = tuple(field.name for field in dataclasses.fields(SpanRow))


def insert_one(session: Session, row: SpanRow) -> bool:
    """Store one span and its rows in its own transaction; False if it was a duplicate."""
    try:
        session.add(SpanRecord(**{name: getattr(row, name) for name in SPAN_FIELDS}))
        if row.name == a.PAIR_SPAN_NAME:
            request, pair = pair_rows(row, 300.0)
            session.add(RequestRecord(**(request or {})))
            session.flush()
            session.add(Pair(**pair))
        elif a.COHORT in row.attributes:
            session.add(Generation(**generation_row(row)))
        session.commit()
        return True
    except IntegrityError:
        session.rollback()
        return False


def database(admin_url: str, name: str, *, create: bool) -> str:
    """(Re)create or drop the throwaway database `name`; return its URL."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        if create:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    if create:
        migrate.upgrade(url)
    return url


def seed(url: str) -> dict[str, int]:
    """Create the two routes and the rollout the spans refer to."""
    engine = create_engine(url)
    with Session(engine) as session, session.begin():
        routes = {
            role.value: Route(name=f"llama-{role.value}", base_url="http://x", model="m", role=role)
            for role in RouteRole
        }
        rollout = Rollout(
            name="bench",
            alias="llama",
            mode=RolloutMode.SHADOW,
            baseline_route=routes["baseline"],
            candidate_route=routes["candidate"],
        )
        session.add(rollout)
        session.flush()
        ids = {"rollout": rollout.id, **{cohort: route.id for cohort, route in routes.items()}}
    engine.dispose()
    return ids


def table_counts(url: str) -> dict[str, int]:
    engine = create_engine(url)
    with engine.connect() as connection:
        count = lambda model: connection.execute(select(func.count()).select_from(model)).scalar()  # noqa: E731
        counts = {m.__tablename__: count(m) for m in (SpanRecord, Generation, Pair, RequestRecord)}
    engine.dispose()
    return counts


def serve(url: str, port: int, home: str, workers: int, acknowledge: str) -> None:
    """Run the collector app as `specgate collect [--workers N]` does (without its pair
    lifecycle, whose evaluations are not part of ingestion)."""
    from collectors.workers import serve as serve_collector

    os.environ["SPECGATE_DATABASE_URL"], os.environ["SPECGATE_HOME"] = url, home
    os.environ["SPECGATE_COLLECTOR_ACKNOWLEDGE"] = acknowledge
    serve_collector(
        collector_app, workers=workers, host="127.0.0.1", port=port, log_level="warning"
    )


def collector_app() -> Any:
    """One collector process (uvicorn's factory: settings from the environment)."""
    from collectors.app import create_app
    from gate.settings import load_settings

    return create_app(load_settings())


def run_collector(
    args: argparse.Namespace, acknowledge: str, clients: int
) -> tuple[str, str, bytes, Offsets, dict[str, float], dict[str, int]]:
    """Measure one collector on a fresh database; return (name, url, body, offsets, rates,
    stored rows). The database is left for the caller to use, then drop."""
    name = f"specgate_bench_{os.getpid()}"
    url = database(args.admin_url, name, create=True)
    body, offsets = template(seed(url), args.raw)
    home = tempfile.mkdtemp(prefix="specgate-bench-")
    command = [
        *(sys.executable, __file__, "--serve", url, "--port", str(args.port), "--home", home),
        *("--collector-workers", str(args.collector_workers), "--acknowledge", acknowledge),
    ]
    server = subprocess.Popen(command)
    base = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(600):
            try:
                httpx.get(f"{base}/healthz").raise_for_status()
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        args.clients = clients
        ours = measure_pipeline(base, body, offsets, args, server.pid)
    finally:
        server.terminate()
        server.wait(60)
        shutil.rmtree(home, ignore_errors=True)
    return name, url, body, offsets, ours, table_counts(url)


def compare(args: argparse.Namespace) -> bool:
    """Acknowledge on receipt (the old behaviour) against acknowledge on durable, with each
    number of exporters, in one run; print a table and the JSON; return the checks' result."""
    runs = []
    for acknowledge in ("received", "durable"):
        for clients in args.exporters:
            name, _, _, _, ours, stored = run_collector(args, acknowledge, clients)
            database(args.admin_url, name, create=False)
            runs.append({"acknowledge": acknowledge, "exporters": clients, "pipeline": ours,
                         "stored": stored, "ok": stored["spans"] == ours["unique"]})  # fmt: skip
    report = {
        "mode": "raw spans" if args.raw else "gateway spans, normalised",
        "duration_s": args.duration, "collector_workers": args.collector_workers,
        "cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0], "runs": runs,
    }  # fmt: skip
    print(json.dumps(report, indent=2, default=str))
    print("acknowledge  exporters  spans/s  answer p50 ms  answer p99 ms  503s  stored once")
    for run in runs:
        line = run["pipeline"]
        print(f"{run['acknowledge']:<12} {run['exporters']:>9} {line['spans_per_s']:>8,.0f} "
              f"{line['answer_p50_ms']:>14.1f} {line['answer_p99_ms']:>14.1f} "
              f"{line['refused_exports']:>5} {run['ok']!s:>12}")  # fmt: skip
    return all(run["ok"] for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of sending")
    parser.add_argument("--row-by-row-duration", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=2, help="sender threads")
    parser.add_argument(
        "--collector-workers", type=int, default=1, help="collector processes (--workers)"
    )
    parser.add_argument(
        "--duplicate-every",
        type=int,
        default=DUPLICATE_EVERY,
        help="re-send every Nth export unchanged, picked from the last 50 (0: none)",
    )
    parser.add_argument("--raw", action="store_true", help="spans with nothing to normalise")
    parser.add_argument("--decode-only", action="store_true", help="parse+convert rate only")
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1/postgres")
    parser.add_argument("--port", type=int, default=14318)
    parser.add_argument("--serve", metavar="DATABASE_URL", help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    parser.add_argument(
        "--acknowledge",
        choices=("durable", "received"),
        default="durable",
        help="when the collector answers: spans durable (default) or received (the old way)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="measure received against durable with each --exporters count, in one run",
    )
    parser.add_argument(
        "--exporters",
        type=lambda text: [int(part) for part in text.split(",")],
        default=[1, 4],
        help="exporter counts for --compare (one export in flight each), e.g. 1,4",
    )
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.home, args.collector_workers, args.acknowledge)
        return
    if args.decode_only:
        body, offsets = template({"rollout": 1, "baseline": 1, "candidate": 2}, args.raw)
        bodies = [fresh(body, offsets) for _ in range(200)]
        started = time.process_time()
        spans = sum(len(decode_protobuf(item).rows) for item in bodies)
        print(f"parse+convert: {spans / (time.process_time() - started):,.0f} spans/s per core")
        return
    if args.compare:
        sys.exit(0 if compare(args) else 1)
    name, url, body, offsets, ours, stored = run_collector(args, args.acknowledge, args.clients)
    slow = row_by_row(url, body, offsets, args.row_by_row_duration)
    database(args.admin_url, name, create=False)
    report = {
        "mode": "raw spans" if args.raw else "gateway spans, normalised",
        "span_bytes": len(body) / (GROUPS_PER_EXPORT * 3), "pipeline": ours,
        "stored": stored, "row_by_row": slow, "speedup": ours["spans_per_s"] / slow["spans_per_s"],
        "collector_workers": args.collector_workers,
        "cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0],
    }  # fmt: skip
    print(json.dumps(report, indent=2, default=str))
    ok = stored["spans"] == ours["unique"] and ours.get("spans_spooled_total", 0) == 0
    print(f"check: every unique span stored once = {stored['spans'] == ours['unique']}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
