"""The drop of one large `spans` partition, on the default tablespace and on another volume.

`bench/partitions.py` times a partition's DETACH and DROP beside the batched delete of the
same rows; the DROP's commit there is the removal of the partition's files, which a volume
mounted with `discard` (each freed extent trimmed inline) makes slow. This bench measures
that alone: a fresh database migrated and `spans` converted to hourly partitions, one
partition filled with `--rows` rows (checkpointed, as a partition past retention is), then
detached and dropped step by step (`bench.partitions.drop_steps`), with the removal of a
file of the same size on the same volume as a control. With `--delete`, the default
volume's run is `bench.partitions.drop_against_delete`: the same rows are also deleted in
retention's batches from an unpartitioned `spans`, timed in the same run. With
`--tablespace-dir DIR` (a directory the postgres user owns, on the volume to compare) the
drop is done again with the partition and its indexes in a tablespace there.

    nice -n 10 python bench/partition_drop.py --rows 10000000 [--delete] [--tablespace-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.partitions import (
    ADMIN,
    FILL,
    database,
    drop_against_delete,
    drop_steps,
    unlink_control,
)
from gate.db import online_partition, partitions

TABLESPACE = "bench_drop"


def one_drop(engine: Engine, rows: int, tablespace: str | None) -> dict[str, object]:
    start = datetime(2020, 1, 1, tzinfo=UTC)  # an hour far in the past, empty
    with engine.begin() as conn:
        if tablespace:  # the partition and the indexes made with it
            conn.execute(text(f"SET LOCAL default_tablespace = {tablespace}"))
        partitions.create_partition(conn, "spans", "start_time", start, 3600)
    started = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(text(FILL.format(table="spans")), {"start": start, "n": rows})
    fill_s = time.perf_counter() - started
    with engine.begin() as conn:
        conn.execute(text("ANALYZE spans"))
        conn.execute(text("CHECKPOINT"))
    name = partitions.partition_name("spans", start)
    with engine.connect() as conn:
        size = int(conn.execute(text(f"SELECT pg_total_relation_size('{name}')")).scalar_one())
        where = conn.execute(
            text("SELECT coalesce(t.spcname, 'default') FROM pg_class c "
                 "LEFT JOIN pg_tablespace t ON t.oid = c.reltablespace WHERE c.relname = :n"),
            {"n": name},
        ).scalar_one()  # fmt: skip
    steps = drop_steps(engine, name)
    return {"tablespace": where, "rows": rows, "partition_bytes": size,
            "fill_s": round(fill_s, 1), **steps}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--tablespace-dir", help="a postgres-owned directory on another volume")
    parser.add_argument(
        "--delete",
        action="store_true",
        help="on the default volume, `bench.partitions.drop_against_delete`: the same rows "
        "also deleted in retention's batches from an unpartitioned `spans`",
    )
    args = parser.parse_args()
    admin = create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    engine = database(admin, "bench_partition_drop")
    online_partition.convert(engine, "spans", period=3600, echo=lambda _line: None)
    places: list[tuple[str | None, str]] = []
    if args.delete:  # the default volume, with the batched delete of the same rows
        flat = database(admin, "bench_partition_drop_flat")
        try:
            against = drop_against_delete(flat, engine, args.rows)
        finally:
            flat.dispose()
            with admin.connect() as conn:
                conn.execute(
                    text('DROP DATABASE IF EXISTS "bench_partition_drop_flat" WITH (FORCE)')
                )
    else:
        against = None
        places.append((None, os.path.dirname(os.path.abspath(__file__))))
    if args.tablespace_dir:
        with admin.connect() as conn:
            conn.execute(text(f"DROP TABLESPACE IF EXISTS {TABLESPACE}"))
            conn.execute(text(f"CREATE TABLESPACE {TABLESPACE} LOCATION '{args.tablespace_dir}'"))
        places.append((TABLESPACE, args.tablespace_dir))
    runs = []
    try:
        for tablespace, directory in places:
            run = one_drop(engine, args.rows, tablespace)
            run["unlink_same_bytes_s"] = round(
                unlink_control(int(run["partition_bytes"]), directory), 3
            )
            run["volume"] = directory
            runs.append(run)
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text('DROP DATABASE IF EXISTS "bench_partition_drop" WITH (FORCE)'))
            if args.tablespace_dir:
                conn.execute(text(f"DROP TABLESPACE IF EXISTS {TABLESPACE}"))
    host = f"{os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d}, load {os.getloadavg()}"
    json.dump({"host": host, "against_delete": against, "runs": runs}, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
