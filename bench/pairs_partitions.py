"""Is the gate's fold flat while older telemetry grows 10x? Buffers, planning, time (issue 43).

    nice -n 15 python bench/pairs_partitions.py --pairs 100000 --older 1000000 --rounds 6 \
        [--period day|hour] [--days 14]

Creates a throwaway database, builds it with the migrations and partitions `pairs`,
`generations`, `requests` and `evaluations` by time (`specgate db partition`'s code), a
partition a `--period` over the `--days` before today, up to `AHEAD` (3) periods ahead.
Loads `--pairs` evaluated shadow pairs of one rollout's stage from today's midnight
(bench/gate_sql.py's pairs: two generations and evaluations each, a request each), and
`--older` pairs of another rollout, with theirs, spread over the partitions wholly before
the stage's bound (its first pair less `SINCE_SLACK`): rows the tables grow by that the
fold must not read. VACUUM ANALYZE.

Then, in `--rounds` rounds, the older partitions attached and detached in alternation
(ABBA, so a drift of the host's load hits both alike), it measures the verdict
(`gate.verdicts.service.compute` and the commit): the initial fold (the stored fold state
deleted first) and a verdict with no new pairs, each timed, and each statement of both
re-run under `EXPLAIN (ANALYZE, BUFFERS)`: the buffers it touched (shared hit + read,
planning's too) do not depend on the host's load, and a pruned plan touches the same
buffers whether the older partitions exist or not. Planning and execution times are
reported beside them. Detaching a partition (its rows gone from the parent) and attaching
it back (its bound kept as a CHECK constraint, so nothing is re-scanned) take a catalog
change each. The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from bench.gate_sql import PARTITIONED, load, on_scratch_database, timed_verdict
from gate.db import online_partition, partitions
from gate.db.engine import make_engine, session_factory
from gate.db.enums import RolloutState
from gate.db.models import Rollout
from gate.stats.policy import load_policy
from gate.verdicts.service import compute
from gate.verdicts.slices import SINCE_SLACK
from tests import factories
from tests.plans import statements

DAY = 86_400


@dataclass(frozen=True)
class Cost:
    """One verdict's statements under EXPLAIN (ANALYZE, BUFFERS), summed."""

    statements: int
    buffers: int
    planning_buffers: int
    planning_ms: float
    execution_ms: float
    # Buffers (execution, planning) per read, by the read's first words.
    each: tuple[tuple[str, int, int], ...] = ()


def partition_all(engine: Engine, starts: list[datetime], period: int) -> None:
    """Partition the empty telemetry tables the gate reads, a partition from each of `starts`."""
    for table in PARTITIONED:
        online_partition.convert(engine, table, period=period, echo=lambda _line: None)
        column = partitions.LAYOUTS[table].column
        with engine.begin() as conn:
            have = {s for _, s, _ in partitions.partitions(conn, table)}
            for start in (s for s in starts if s not in have):
                partitions.create_partition(conn, table, column, start, period)


def store_older(dsn: str, rollout_id: int, n: int, first: datetime, until: datetime) -> None:
    """Store `n` pairs of `rollout_id` spread over [first, until), with two generations, two
    evaluations and a request each."""
    step = (until - first).total_seconds() / max(n, 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pairs (id, rollout_id, stage, state, is_control, segment, created_at, "
            "deadline, evaluated_at) SELECT gen_random_uuid(), %(r)s, 0, 'complete', false, "
            "'chat', %(t)s + i * %(s)s * interval '1 second', %(t)s, "
            "%(t)s + i * %(s)s * interval '1 second' FROM generate_series(0, %(n)s - 1) AS i",
            {"r": rollout_id, "t": first, "s": step, "n": n},
        )
        conn.execute(
            "INSERT INTO generations (rollout_id, pair_id, cohort, segment, status, stream, "
            "started_at, ttft_s, tpot_s, e2e_s) SELECT p.rollout_id, p.id, c.cohort, 'chat', "
            "'ok', true, p.created_at, 0.1, 0.02, 1.0 FROM pairs p CROSS JOIN "
            "(VALUES ('baseline'), ('candidate')) AS c(cohort) WHERE p.rollout_id = %(r)s",
            {"r": rollout_id},
        )
        conn.execute(
            "INSERT INTO evaluations (generation_id, generation_started_at, evaluator, version, "
            "passed, details, created_at) SELECT id, started_at, 'task', '1', true, '{}', "
            "started_at FROM generations WHERE rollout_id = %(r)s",
            {"r": rollout_id},
        )


def store_requests(dsn: str) -> None:
    """Write every pair's request, as the collector does from the pair span."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO requests (id, rollout_id, endpoint, body, inputs, segment, "
            "inflight_baseline, inflight_candidate, created_at) SELECT id, rollout_id, 'chat', "
            "'{}', '{}', segment, 0, 0, created_at FROM pairs"
        )


Older = dict[str, list[tuple[str, datetime, datetime]]]


def older_partitions(engine: Engine, bound: datetime) -> Older:
    """Return each table's partitions wholly before `bound`, and keep each one's bound as a
    CHECK constraint, so attaching it back scans nothing."""
    found: Older = {}
    with engine.begin() as conn:
        for table in PARTITIONED:
            column = partitions.LAYOUTS[table].column
            found[table] = [p for p in partitions.partitions(conn, table) if p[2] <= bound]
            for name, start, end in found[table]:
                conn.execute(
                    text(
                        f"ALTER TABLE {name} ADD CONSTRAINT {name}_bound CHECK "
                        f"({column} >= '{start.isoformat()}' AND {column} < '{end.isoformat()}')"
                    )
                )
    return found


def set_older(engine: Engine, older: Older, *, attached: bool) -> None:
    """Attach or detach the older partitions of every table."""
    with engine.begin() as conn:
        for table, held in older.items():
            for name, start, end in held:
                conn.execute(
                    text(
                        f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM "
                        f"('{start.isoformat()}') TO ('{end.isoformat()}')"
                    )
                    if attached
                    else text(f"ALTER TABLE {table} DETACH PARTITION {name}")
                )


def cost(sessions: sessionmaker[Session], rollout_id: int, *, initial: bool) -> Cost:
    """Run one verdict (rolled back) and re-run each of its reads under EXPLAIN (ANALYZE,
    BUFFERS), twice, keeping the second (the first warms the catalog caches)."""
    found: list[dict[str, Any]] = []
    names: list[str] = []
    with sessions() as db:
        if initial:
            db.execute(text("DELETE FROM gate_folds"))
        rollout = db.get(Rollout, rollout_id)
        assert rollout is not None
        conn = db.connection()
        with statements(conn, "") as seen:
            compute(db, rollout=rollout, policy=load_policy(rollout.policy))
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        for statement, parameters in seen:
            if not statement.lstrip().upper().startswith(("SELECT", "WITH")):
                continue
            for _ in range(2):
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, parameters)
                plan = cursor.fetchone()[0][0]
            found.append(plan)
            names.append(" ".join(statement.split())[:90])
        db.rollback()
    return Cost(
        statements=len(found),
        buffers=sum(
            p["Plan"]["Shared Hit Blocks"] + p["Plan"]["Shared Read Blocks"] for p in found
        ),
        planning_buffers=sum(
            p.get("Planning", {}).get("Shared Hit Blocks", 0)
            + p.get("Planning", {}).get("Shared Read Blocks", 0)
            for p in found
        ),
        planning_ms=sum(p["Planning Time"] for p in found),
        execution_ms=sum(p["Execution Time"] for p in found),
        each=tuple((name, _executed(p), _planned(p)) for name, p in zip(names, found, strict=True)),
    )


def _executed(plan: dict[str, Any]) -> int:
    return int(plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"])


def _planned(plan: dict[str, Any]) -> int:
    planning = plan.get("Planning", {})
    return int(planning.get("Shared Hit Blocks", 0) + planning.get("Shared Read Blocks", 0))


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def bench(url: str, args: argparse.Namespace) -> None:
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    engine = make_engine(url)
    sessions = session_factory(engine)
    period = partitions.PERIODS[args.period]
    today = partitions.floor(datetime.now(UTC), DAY)
    first = today - timedelta(days=args.days)
    # Up to `AHEAD` periods past the current one, as the partitions job keeps them: a read
    # bounded only from below plans every partition ahead.
    last = partitions.floor(datetime.now(UTC), period) + timedelta(
        seconds=period * partitions.AHEAD
    )
    count = int((last - first).total_seconds()) // period + 1
    started = time.perf_counter()
    partition_all(engine, [first + timedelta(seconds=period * k) for k in range(count)], period)
    print(f"{count} partitions of {period} s per table ({', '.join(PARTITIONED)}) "
          f"in {time.perf_counter() - started:.1f} s")  # fmt: skip
    with sessions() as db, db.begin():
        rollout = factories.rollout(db, name="bench", policy={"stages": [100]})
        rollout.state = RolloutState.RUNNING
        other = factories.rollout(db, name="older", policy={"stages": [100]})
        rollout_id, other_id = rollout.id, other.id
    started = time.perf_counter()
    load(dsn, rollout_id, args.pairs, first=0, start=today, seed=0)
    # The stage's bound is its first pair less SINCE_SLACK: older rows stop at the
    # partition holding it, so every one is in a partition the fold never reads.
    bound = partitions.floor(today - SINCE_SLACK, period)
    store_older(dsn, other_id, args.older, first, bound)
    store_requests(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in PARTITIONED}  # type: ignore[index]
    print(f"loaded {args.pairs:,} pairs of the stage and {args.older:,} older in "
          f"{time.perf_counter() - started:.1f} s: {rows}")  # fmt: skip
    older = older_partitions(engine, bound)
    print(f"older partitions (detached in alternation): {len(older['pairs'])} per table, "
          f"all before {bound.isoformat()}")  # fmt: skip
    results: dict[bool, list[tuple[float, float, Cost, Cost]]] = {True: [], False: []}
    now_attached = True
    for k in range(args.rounds):
        for attached in (True, False) if k % 2 == 0 else (False, True):
            if attached != now_attached:
                set_older(engine, older, attached=attached)
                now_attached = attached
            with sessions() as db, db.begin():
                db.execute(text("DELETE FROM gate_folds"))
            initial, _ = timed_verdict(sessions, rollout_id)
            idle, verdict = timed_verdict(sessions, rollout_id)
            plans = (
                cost(sessions, rollout_id, initial=True),
                cost(sessions, rollout_id, initial=False),
            )
            results[attached].append((initial, idle, *plans))
            label = "with older" if attached else "without   "
            print(f"round {k} {label}: initial {initial:.3f} s, idle {idle:.3f} s; "
                  f"initial {show(plans[0])} | idle {show(plans[1])}; {verdict.n_pairs:,} pairs; "
                  f"load {load_average()}")  # fmt: skip
    for attached in (False, True):
        runs = results[attached]
        label = "with older rows" if attached else "without older  "
        buffers = sorted({r[2].buffers for r in runs})
        print(f"{label}: initial median {median([r[0] for r in runs])}, idle median "
              f"{median([r[1] for r in runs])}; buffers initial {buffers}, "
              f"idle {sorted({r[3].buffers for r in runs})}; planning ms initial "
              f"{median([r[2].planning_ms for r in runs], 1)}, idle "
              f"{median([r[3].planning_ms for r in runs], 1)}; planning buffers initial "
              f"{sorted({r[2].planning_buffers for r in runs})}, idle "
              f"{sorted({r[3].planning_buffers for r in runs})}")  # fmt: skip
    # Where the two differ, read by read (the last round of each).
    for which in (2, 3):
        kind = "initial" if which == 2 else "idle"
        with_older, without = results[True][-1][which].each, results[False][-1][which].each
        for (name, b1, p1), (_, b0, p0) in zip(with_older, without, strict=False):
            if (b1, p1) != (b0, p0):
                print(f"  {kind}: {b0:,} -> {b1:,} buffers, planning {p0:,} -> {p1:,}: {name}")
    engine.dispose()


def show(c: Cost) -> str:
    return (f"{c.statements} reads, {c.buffers:,} buffers, planning "
            f"{c.planning_ms:.1f} ms ({c.planning_buffers:,} buffers), execution "
            f"{c.execution_ms:.0f} ms")  # fmt: skip


def median(values: list[float], scale: int = 3) -> str:
    return (
        f"{statistics.median(values):.{scale}f} ({min(values):.{scale}f}-{max(values):.{scale}f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--older", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--period", choices=sorted(partitions.PERIODS), default="day")
    parser.add_argument("--days", type=int, default=14, help="days of partitions before today")
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    on_scratch_database(args.server, lambda url: bench(url, args))


if __name__ == "__main__":
    main()
