"""Time the gate's fold on a time-partitioned `pairs` while older rows grow (issue 43).

    nice -n 10 python bench/pairs_partitions.py --pairs 100000 --older 1000000 --repeat 3

Creates a throwaway database, builds it with the migrations and partitions `pairs` by
`created_at`, a day a partition (`specgate db partition pairs --period day`'s code, with the
ten days before today made too). Loads `--pairs` evaluated shadow pairs of
one rollout's stage today (bench/gate_sql.py's pairs: two generations and evaluations
each), runs VACUUM ANALYZE (autovacuum catching up would share the CPU with the timing),
then times the verdict (`gate.verdicts.service.compute` and the commit): the
initial fold (the stored fold state deleted before each run) and a verdict with no new
pairs. Then stores `--older` pairs of another rollout spread over the ten days before,
in their own partitions, runs VACUUM ANALYZE and times the same again. The database is dropped
at the end.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime, timedelta

import psycopg
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from bench.gate_sql import load, on_scratch_database, report, timed_verdict
from gate.db import partitions
from gate.db.engine import make_engine, session_factory
from gate.db.enums import RolloutState
from tests import factories
from tests.gate.verdicts.test_partitioned_pairs import partition_pairs

DAY = 86_400


def folds(sessions: sessionmaker[Session], rollout_id: int, repeat: int, label: str) -> None:
    """Time `repeat` initial folds, then `repeat` verdicts with no new pairs."""
    initial = []
    for _ in range(repeat):
        with sessions() as db, db.begin():
            db.execute(text("DELETE FROM gate_folds"))
        initial.append(timed_verdict(sessions, rollout_id))
    report(f"{label}: initial fold + verdict", initial)
    idle = [timed_verdict(sessions, rollout_id) for _ in range(repeat)]
    report(f"{label}: verdict, 0 new pairs", idle)


def bench(url: str, args: argparse.Namespace) -> None:
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    engine = make_engine(url)
    sessions = session_factory(engine)
    today = partitions.floor(datetime.now(UTC), DAY)
    days = [today + timedelta(days=d) for d in range(-10, 2)]
    partition_pairs(engine, days)
    with sessions() as db, db.begin():
        rollout = factories.rollout(db, name="bench", policy={"stages": [100]})
        rollout.state = RolloutState.RUNNING
        older = factories.rollout(db, name="older", policy={"stages": [100]})
        rollout_id, older_id = rollout.id, older.id
    started = time.perf_counter()
    load(dsn, rollout_id, args.pairs, first=0, start=today, seed=0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    print(f"loaded {args.pairs:,} pairs of the stage in {time.perf_counter() - started:.1f} s")
    folds(sessions, rollout_id, args.repeat, "0 older pairs")
    started = time.perf_counter()
    step_s = 10 * DAY / max(args.older, 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pairs (id, rollout_id, stage, state, is_control, segment, created_at, "
            "deadline, evaluated_at) SELECT gen_random_uuid(), %(r)s, 0, 'complete', false, "
            "'chat', %(t)s + i * %(s)s * interval '1 second', %(t)s, "
            "%(t)s + i * %(s)s * interval '1 second' FROM generate_series(0, %(n)s - 1) AS i",
            {"r": older_id, "t": days[0], "s": step_s, "n": args.older},
        )
        conn.execute("VACUUM ANALYZE")
        total = conn.execute("SELECT count(*) FROM pairs").fetchone()
    print(f"stored {args.older:,} older pairs in {time.perf_counter() - started:.1f} s; "
          f"pairs holds {total[0] if total else 0:,} rows")  # fmt: skip
    folds(sessions, rollout_id, args.repeat, f"{args.older:,} older pairs")
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--older", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    on_scratch_database(args.server, lambda url: bench(url, args))


if __name__ == "__main__":
    main()
