"""A compressed day on Postgres: time-partitioned `spans` against today's table.

Two fresh databases built by the migrations, one converted by `specgate db partition`'s
code with a short period. Batches of gateway-shaped raw spans (collector path:
`storage.insert_spans`) go to both in turn, each stamped with the real clock, so ingest
crosses partition boundaries while the partitions job creates partitions ahead and
retention drops old ones. Then one partition of --drop-rows rows (checkpointed, as a
partition past retention is) is detached and dropped, each statement and the commit timed,
and the same rows deleted in batches from the unpartitioned table; the filesystem's removal
of a file of the partition's size is timed alongside, as a control.

    nice -n 10 python bench/partitions.py --seconds 45 --period 10 --drop-rows 10000000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, create_engine, text

from collectors.retention import _SPANS, _delete_before, _repeat
from gate.db import migrate, online_partition, partitions, storage
from gate.db.engine import make_engine
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
            # A partition past retention was written days ago: its pages are on disk.
            conn.execute(text("CHECKPOINT"))
    name = partitions.partition_name("spans", start)
    with split.connect() as conn:
        size = int(conn.execute(text(f"SELECT pg_total_relation_size('{name}')")).scalar_one())
    steps = drop_steps(split, name)
    table = _SPANS
    key = (table.c.trace_id, table.c.span_id)
    cut = start + timedelta(hours=1)
    started = time.perf_counter()  # retention's batches, at its default batch size
    deleted = _repeat(flat, lambda: _delete_before(table.c.start_time, key, cut, 5_000))
    delete_s = time.perf_counter() - started
    return {
        "rows": rows, "partition_bytes": size, **steps,
        "unlink_same_bytes_s": round(unlink_control(size), 3),
        "batched_delete_rows": deleted, "batched_delete_s": round(delete_s, 1),
    }  # fmt: skip


def drop_steps(engine: Engine, name: str) -> dict[str, object]:
    """Time what `partitions.drop_before` runs, statement by statement, sampling what the
    dropping backend waits on from a second connection."""
    timed: dict[str, float] = {}
    waits: dict[str, int] = {}
    with engine.connect() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        conn.commit()
        started = time.perf_counter()
        with conn.begin():
            conn.execute(text(f"ALTER TABLE spans DETACH PARTITION {name}"))
        timed["detach_s"] = time.perf_counter() - started
        done = threading.Event()
        gone: list[float] = []
        watcher = threading.Thread(
            target=sample_waits, args=(engine, pid, done, waits, (name, gone))
        )
        watcher.start()
        try:
            tx = conn.begin()
            started = time.perf_counter()
            conn.execute(text(f"DROP TABLE {name}"))
            timed["drop_statement_s"] = time.perf_counter() - started
            started = time.perf_counter()
            tx.commit()  # the relation's files are removed here
            timed["drop_commit_s"] = time.perf_counter() - started
            committing = started
        finally:
            done.set()
            watcher.join()
    timed["detach_and_drop_s"] = sum(timed.values())
    # Postgres removes a dropped table's files after the commit is visible and its locks
    # are released: when the table left the catalog for another session.
    seen = {"drop_seen_by_others_s": round(gone[0] - committing, 3)} if gone else {}
    return {**{k: round(v, 3) for k, v in timed.items()}, **seen, "drop_wait_samples": waits}


def sample_waits(
    engine: Engine,
    pid: int,
    done: threading.Event,
    waits: dict[str, int],
    table: tuple[str, list[float]],
) -> None:
    name, gone = table
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        while not done.wait(0.01):
            if (
                not gone
                and conn.execute(text("SELECT to_regclass(:t)"), {"t": name}).scalar() is None
            ):
                gone.append(time.perf_counter())
            row = conn.execute(
                text(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, 'running'), state "
                    "FROM pg_stat_activity WHERE pid = :p"
                ),
                {"p": pid},
            ).one()
            key = f"{row[0]} ({row[1]})"
            waits[key] = waits.get(key, 0) + 1


def unlink_control(size: int, directory: str | None = None) -> float:
    """Write and fsync `size` bytes in `directory` (default: next to the bench), then time
    their removal: what the filesystem alone takes to free that much."""
    where = directory or os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(where, ".unlink-control")
    chunk = b"\0" * (1 << 20)
    with open(path, "wb") as handle:
        for _ in range(max(size >> 20, 1)):
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())
    started = time.perf_counter()
    os.unlink(path)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--period", type=int, default=10, help="partition period, seconds")
    parser.add_argument(
        "--drop-rows", type=int, default=1_000_000, help="rows in the dropped partition"
    )
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
