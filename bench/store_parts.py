"""Where a normalised batch's time goes: `SpanStore.write` on Postgres, per span.

    .venv/bin/python bench/store_parts.py [--batches 40] [--repeats 2] \
        [--server-log /var/log/postgresql/postgresql-15-main.log]

Decodes `--batches` exports of gateway spans (510 spans each, from `bench/ingest_spans.py`)
once, then writes them through `collectors.store.SpanStore.write`, one transaction per
export, on one connection to a throwaway database built by the migrations. Reported per
span: the writer's own CPU (Python, psycopg), the CPU of the Postgres backend serving it
(from /proc), and the size of the `spans` table per row. Three schemas, each on a fresh
database, alternated over `--repeats`: as migrated; `generations` without its foreign
keys; and without its secondary indexes as well (what those cost, not a proposal).

With `--server-log` (the local server's log file, readable here), every statement's time
is logged (`log_min_duration_statement = 0` on the throwaway database only) and summed
per statement, as microseconds per span.

`--normalise-only` times, in this process and without a database, what the writer does
to an export before Postgres sees it: `normalise` and the JSON of each stored span's
attributes (best of `--rounds`, µs per span).

To compare with an earlier commit in the same run, put its checkout first on the path:
`PYTHONPATH=/tmp/before .venv/bin/python bench/store_parts.py` (it prints which
`collectors` it ran).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

from sqlalchemy import Connection, create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import database, seed
from ingest_spans import fresh, template

import collectors
from collectors.normalise import normalise
from collectors.otlp import decode_protobuf
from collectors.store import SpanStore
from gate.db.storage.pg_copy import dump_json

SCHEMAS = ("as migrated", "no generations FKs", "no generations FKs or indexes")
_DURATION = re.compile(r"duration: ([0-9.]+) ms\s+(?:statement|execute [^:]*|bind [^:]*):\s*(.*)")


def strip(conn: Connection, schema: str) -> None:
    """Drop what `schema` leaves out of the `generations` table."""
    if schema != SCHEMAS[0]:
        keys = (
            "SELECT conname FROM pg_constraint "
            "WHERE contype = 'f' AND conrelid = 'generations'::regclass"
        )
        _drop_each(conn, keys, 'ALTER TABLE generations DROP CONSTRAINT "{}"')
    if schema == SCHEMAS[2]:
        indexes = (
            "SELECT indexname FROM pg_indexes WHERE tablename = 'generations' "
            "AND indexname NOT LIKE '%pkey' AND indexdef NOT LIKE '%UNIQUE%'"
        )
        _drop_each(conn, indexes, 'DROP INDEX "{}"')


def _drop_each(conn: Connection, names: str, drop: str) -> None:
    for name in list(conn.execute(text(names)).scalars()):
        conn.execute(text(drop.format(name)))


def backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def statements(log: Path, start: int, spans: int) -> list[tuple[float, int, str]]:
    """(µs per span, count, statement head) for what the server logged after `start`."""
    total: Counter[str] = Counter()
    count: Counter[str] = Counter()
    with log.open(errors="replace") as file:
        file.seek(start)
        for line in file:
            match = _DURATION.search(line)
            if match:
                head = " ".join(match.group(2).split()[:3])
                total[head] += float(match.group(1))
                count[head] += 1
    return [(ms * 1000 / spans, count[head], head) for head, ms in total.most_common(8)]


def run(admin_url: str, schema: str, batches: int, log: Path | None) -> dict[str, object]:
    name = f"specgate_store_parts_{os.getpid()}"
    url = database(admin_url, name, create=True)
    try:
        ids = seed(url)
        engine = create_engine(url, pool_size=1, max_overflow=0)
        with engine.begin() as conn:
            strip(conn, schema)
            if log is not None:
                conn.execute(text(f'ALTER DATABASE "{name}" SET log_min_duration_statement = 0'))
        engine.dispose()  # the setting holds for connections made after it
        body, offsets = template(ids, False)
        exports = [decode_protobuf(fresh(body, offsets)).rows for _ in range(batches + 1)]
        store = SpanStore(engine, pair_deadline_s=300)
        store.write(exports[0])  # staging tables, caches and plans warm
        with engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        log_start = log.stat().st_size if log is not None else 0
        spans = sum(len(rows) for rows in exports[1:])
        postgres, cpu, wall = backend_cpu(pid), time.process_time(), time.perf_counter()
        for rows in exports[1:]:
            store.write(rows)
        wall = time.perf_counter() - wall
        cpu, postgres = time.process_time() - cpu, backend_cpu(pid) - postgres
        with engine.connect() as conn:
            size, rows = conn.execute(
                text("SELECT pg_total_relation_size('spans'), count(*) FROM spans")
            ).one()
        engine.dispose()
        return {
            "schema": schema,
            "wall_us": wall / spans * 1e6,
            "writer_us": cpu / spans * 1e6,
            "postgres_us": postgres / spans * 1e6,
            "spans_bytes_per_row": size / rows,
            "statements": statements(log, log_start, spans) if log is not None else [],
        }
    finally:
        database(admin_url, name, create=False)


def normalise_only(batches: int, rounds: int) -> float:
    """Best time per span of normalising an export and writing its spans' JSON."""
    body, offsets = template({"rollout": 1, "baseline": 1, "candidate": 2}, False)
    exports = [decode_protobuf(fresh(body, offsets)).rows for _ in range(batches)]
    spans, best = sum(len(rows) for rows in exports), float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for rows in exports:
            for span in normalise(rows, pair_deadline_s=300).spans:
                dump_json(span.attributes)
        best = min(best, time.perf_counter() - start)
    return best / spans * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40, help="510-span exports per run")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--schemas", type=int, default=len(SCHEMAS), help="the first N schemas")
    parser.add_argument("--server-log", type=Path, default=None)
    parser.add_argument("--normalise-only", action="store_true")
    parser.add_argument("--rounds", type=int, default=30, help="with --normalise-only")
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1/postgres")
    args = parser.parse_args()
    print(f"collectors from {Path(collectors.__file__).parent}", flush=True)
    if args.normalise_only:
        per_span = normalise_only(min(args.batches, 10), args.rounds)
        print(f"normalise + the stored spans' JSON: {per_span:.2f} µs/span", flush=True)
        return
    print("| schema | wall µs/span | writer CPU µs/span | Postgres CPU µs/span | spans B/row |")
    print("|---|---|---|---|---|")
    for _ in range(args.repeats):
        for schema in SCHEMAS[: args.schemas]:
            row = run(args.admin_url, schema, args.batches, args.server_log)
            print(
                f"| {schema} | {row['wall_us']:.1f} | {row['writer_us']:.1f} | "
                f"{row['postgres_us']:.1f} | {row['spans_bytes_per_row']:.0f} |",
                flush=True,
            )
            for per_span, count, head in row["statements"]:  # type: ignore[attr-defined]
                print(f"|   {head} ({count} times) | {per_span:.1f} | | | |", flush=True)


if __name__ == "__main__":
    main()
