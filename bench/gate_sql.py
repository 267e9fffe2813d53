"""Time one gate verdict over N stored pairs in Postgres (the SQL aggregate path).

    python bench/gate_sql.py --pairs 1000000 --repeat 3

Creates a throwaway database on the local server, builds it with the migrations, loads N
complete shadow pairs (two generations and two evaluations each, five segments) with
COPY, runs ANALYZE, then times `gate.verdicts.service.compute` (what the periodic gate and
`gate check` run) several times. The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import time
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from gate.db import migrate
from gate.db.engine import make_engine, session_factory
from gate.db.enums import RolloutState
from gate.db.models import Rollout
from gate.stats.policy import load_policy
from gate.verdicts.service import compute
from tests import factories

SEGMENTS = ["code", "json", "rag", "chat", "creative"]


def load(url: str, rollout_id: int, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    start = datetime.now(UTC) - timedelta(days=2)
    shared = np.exp(rng.normal(0, 0.5, n))
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy(
            "COPY pairs (id, rollout_id, stage, state, is_control, segment, "
            "created_at, deadline) FROM STDIN"
        ) as copy:
            ids = [uuid.uuid4() for _ in range(n)]
            for i, pair_id in enumerate(ids):
                created = start + timedelta(milliseconds=150 * i)
                copy.write_row(
                    (
                        pair_id,
                        rollout_id,
                        0,
                        "complete",
                        False,
                        SEGMENTS[i % 5],
                        created,
                        created + timedelta(minutes=5),
                    )
                )
        with cur.copy(
            "COPY generations (id, rollout_id, pair_id, cohort, segment, status, "
            "ttft_s, tpot_s, e2e_s, spec_draft_tokens, spec_accepted_tokens, stream, "
            "started_at) FROM STDIN"
        ) as copy:
            for i, pair_id in enumerate(ids):
                created = start + timedelta(milliseconds=150 * i)
                for side, cohort in enumerate(("baseline", "candidate")):
                    tpot = 0.02 * shared[i] * (0.8 if side else 1.0)
                    copy.write_row(
                        (
                            2 * i + side + 1,
                            rollout_id,
                            pair_id,
                            cohort,
                            SEGMENTS[i % 5],
                            "ok",
                            0.1 * shared[i],
                            tpot,
                            0.1 + 64 * tpot,
                            40 * side,
                            30 * side,
                            True,
                            created,
                        )
                    )
        with cur.copy(
            "COPY evaluations (generation_id, evaluator, version, passed, details, "
            "created_at) FROM STDIN"
        ) as copy:
            passed = rng.random(n) < 0.85
            for i in range(n):
                for side in (0, 1):
                    copy.write_row((2 * i + side + 1, "task", "1", bool(passed[i]), "{}", start))
        conn.execute("SELECT setval('generations_id_seq', %s)", (2 * n + 1,))
        conn.commit()
        conn.execute("ANALYZE")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    admin = create_engine(args.server, isolation_level="AUTOCOMMIT")
    name = f"specgate_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(args.server).set(database=name).render_as_string(hide_password=False)
    try:
        migrate.upgrade(url)
        sessions = session_factory(make_engine(url))
        with sessions() as db, db.begin():
            rollout = factories.rollout(db, name="bench", policy={"stages": [100]})
            rollout.state = RolloutState.RUNNING
            rollout_id = rollout.id
        started = time.perf_counter()
        load(url, rollout_id, args.pairs)
        print(f"loaded {args.pairs:,} pairs in {time.perf_counter() - started:.1f} s")
        for attempt in range(args.repeat):
            with sessions() as db:
                rollout = db.get(Rollout, rollout_id)
                assert rollout is not None
                policy = load_policy(rollout.policy)
                started = time.perf_counter()
                verdict = compute(db, rollout=rollout, policy=policy)
                took = time.perf_counter() - started
            print(
                f"verdict {attempt + 1}: {took:.3f} s  {verdict.decision.value} on "
                f"{verdict.n_pairs:,} pairs"
            )
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


if __name__ == "__main__":
    main()
