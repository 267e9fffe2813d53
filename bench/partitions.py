"""A compressed day on Postgres: time-partitioned `spans` against today's table.

Two fresh databases built by the migrations, one converted by `specgate db partition`'s
code with a short period. Batches of gateway-shaped raw spans (collector path:
`storage.insert_spans`) go to both in turn, each stamped with the real clock, so ingest
crosses partition boundaries while the partitions job creates partitions ahead and
retention drops old ones. Then one partition of --drop-rows rows is dropped, and the same
rows deleted in batches from the unpartitioned table.

    python bench/partitions.py --seconds 60 --period 10 --drop-rows 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, create_engine, text

from collectors.retention import _delete_spans, _repeat
from gate.db import migrate, online_partition, partitions, storage
from gate.db.engine import make_engine
from gate.db.models import SpanRecord
from gate.db.rows import SpanRow

ADMIN = os.environ.get("BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
BATCH = 510  # one OTel SDK export


def database(admin: Engine, name: str) -> Engine:
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = admin.url.set(database=name).render_as_string(hide_password=False)
    migrate.upgrade(url)
    return make_engine(url)


def batch(now: datetime) -> list[SpanRow]:
    attributes = {"gen_ai.request.model": "llama-3.1-8b-instruct", "specgate.segment": "code"}
    return [
        SpanRow(uuid.uuid4().hex, uuid.uuid4().hex[:16], None, "chat llama", 3, now,
                now + timedelta(seconds=1), 0, None, attributes, {"service.name": "gw"}, "gw")
        for _ in range(BATCH)
    ]  # fmt: skip


def write(engine: Engine, rows: list[SpanRow]) -> tuple[int, float]:
    started = time.perf_counter()
    with engine.begin() as conn:
        new = storage.of(engine).insert_spans(conn, rows, datetime.now(UTC))
    return new, time.perf_counter() - started


def count(engine: Engine, table: str = "spans") -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def retire(engine: Engine, cut: datetime) -> int:
    """Drop partitions wholly before `cut` (retention), counting their rows first."""
    with engine.connect() as conn:
        old = [name for name, _, end in partitions.partitions(conn, "spans") if end <= cut]
    rows = sum(count(engine, name) for name in old)
    partitions.drop_before(engine, "spans", cut)
    return rows


def compressed_day(flat: Engine, split: Engine, seconds: float, period: int) -> dict[str, object]:
    acked = {"flat": 0, "split": 0}
    spent = {"flat": 0.0, "split": 0.0}
    retired = 0
    boundaries: set[datetime] = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        now = datetime.now(UTC)
        boundaries.add(partitions.floor(now, period))
        rows = batch(now)
        for name, engine in (("flat", flat), ("split", split)):
            new, took = write(engine, rows)
            acked[name] += new
            spent[name] += took
        with split.begin() as conn:  # the partitions job, at every turn here
            partitions.ensure_ahead(conn, "spans", now)
        retired += retire(split, now - timedelta(seconds=3 * period))  # retention
    stored = {"flat": count(flat), "split": count(split)}
    return {
        "seconds": seconds, "period_s": period, "boundaries_crossed": len(boundaries) - 1,
        "spans_per_s": {k: round(acked[k] / spent[k]) for k in acked},
        "ratio": round((acked["split"] / spent["split"]) / (acked["flat"] / spent["flat"]), 3),
        "acknowledged": acked, "stored_now": stored, "dropped_by_retention": retired,
        "lost": acked["split"] - stored["split"] - retired,
        "default_rows": count(split, "spans_default"),
    }  # fmt: skip


FILL = """
INSERT INTO {table} (trace_id, span_id, name, kind, start_time, end_time, status_code,
  attributes, resource, received_at)
SELECT md5(g::text), left(md5('s' || g), 16), 'chat llama', 3,
  :start + (g % 3000) * interval '1 second', :start + interval '1 hour', 0,
  '{{"specgate.segment": "code"}}'::jsonb, '{{}}'::jsonb, now()
FROM generate_series(1, :n) AS g
"""


def drop_against_delete(flat: Engine, split: Engine, rows: int) -> dict[str, object]:
    start = datetime(2020, 1, 1, tzinfo=UTC)  # an hour far in the past, empty in both
    with split.begin() as conn:
        partitions.create_partition(conn, "spans", "start_time", start, 3600)
    for engine in (flat, split):
        with engine.begin() as conn:
            conn.execute(text(FILL.format(table="spans")), {"start": start, "n": rows})
        with engine.begin() as conn:
            conn.execute(text("ANALYZE spans"))
    name = partitions.partition_name("spans", start)
    started = time.perf_counter()
    with split.begin() as conn:  # what `partitions.drop_before` runs, timed step by step
        conn.execute(text(f"ALTER TABLE spans DETACH PARTITION {name}"))
    detach_s = time.perf_counter() - started
    with split.begin() as conn:
        conn.execute(text(f"DROP TABLE {name}"))
    drop_s = time.perf_counter() - started
    table = SpanRecord.__table__
    cut = start + timedelta(hours=1)
    started = time.perf_counter()
    deleted = _repeat(flat, lambda: _delete_spans(table, cut, 5_000))  # type: ignore[arg-type]
    delete_s = time.perf_counter() - started
    return {
        "rows": rows, "detach_s": round(detach_s, 3), "detach_and_drop_s": round(drop_s, 3),
        "batched_delete_rows": deleted, "batched_delete_s": round(delete_s, 1),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--period", type=int, default=10, help="partition period, seconds")
    parser.add_argument("--drop-rows", type=int, default=1_000_000)
    args = parser.parse_args()
    admin = create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    flat, split = database(admin, "bench_spans_flat"), database(admin, "bench_spans_split")
    online_partition.convert(split, "spans", period=args.period, echo=lambda _l: None)
    result = {
        "host": f"{os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d}",
        "compressed_day": compressed_day(flat, split, args.seconds, args.period),
        "drop": drop_against_delete(flat, split, args.drop_rows),
    }
    json.dump(result, sys.stdout, indent=2)
    print()
    for engine in (flat, split):
        engine.dispose()
    with admin.connect() as conn:
        for name in ("bench_spans_flat", "bench_spans_split"):
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


if __name__ == "__main__":
    main()
