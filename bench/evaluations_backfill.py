"""Time migration 0032's backfill of `evaluations.generation_started_at` (issue 43).

    nice -n 10 python bench/evaluations_backfill.py --generations 200000 --per 5

Creates a throwaway database migrated to 0030 (before the column), stores `--generations`
generations of one rollout and `--per` evaluations of each, runs ANALYZE, then times
`specgate db upgrade` to 0032: the column added, filled from each evaluation's generation
in batches of 10,000 generations (a transaction each), validated and made NOT NULL. Prints
the rows filled a second and checks that none was left NULL. The database is dropped at the
end.
"""

from __future__ import annotations

import argparse
import time
import uuid

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from gate.db import migrate
from gate.db.engine import make_engine
from tests import factories

_GENERATIONS = """INSERT INTO generations (rollout_id, cohort, segment, stream, status, trace_id,
  span_id, started_at) SELECT :r, 'baseline', 'chat', false, 'ok', md5(i::text),
  substr(md5(i::text), 1, 16), now() - i * interval '1 second' FROM generate_series(1, :n) i"""
_EVALUATIONS = """INSERT INTO evaluations (generation_id, evaluator, version, details, created_at)
  SELECT g.id, 'e' || k, '1', '{}', now() FROM generations g, generate_series(1, :k) k"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--generations", type=int, default=200_000)
    parser.add_argument("--per", type=int, default=5)
    args = parser.parse_args()
    admin = create_engine(args.server, isolation_level="AUTOCOMMIT")
    name = f"specgate_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(args.server).set(database=name).render_as_string(hide_password=False)
    try:
        run(url, args.generations, args.per)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def run(url: str, generations: int, per: int) -> None:
    migrate.upgrade(url, "0030")
    engine = make_engine(url)
    with Session(engine) as session:
        rollout_id = factories.rollout(session).id
        session.commit()
    with engine.begin() as conn:
        conn.execute(text(_GENERATIONS), {"r": rollout_id, "n": generations})
        conn.execute(text(_EVALUATIONS), {"k": per})
        conn.execute(text("ANALYZE"))
    start = time.perf_counter()
    migrate.upgrade(url, "0032")
    took = time.perf_counter() - start
    with engine.connect() as conn:
        rows, empty = conn.execute(
            text("SELECT count(*), count(*) - count(generation_started_at) FROM evaluations")
        ).one()
    engine.dispose()
    print(f"0032 on {rows} evaluations of {generations} generations: {took:.1f} s "
          f"({rows / took:,.0f} rows/s), left NULL: {empty}")  # fmt: skip


if __name__ == "__main__":
    main()
