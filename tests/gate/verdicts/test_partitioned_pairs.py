"""The gate's fold on a time-partitioned `pairs` (issue 43): its slice queries read only
the partitions of the stage's window (EXPLAIN on real Postgres). The verdict before and
after a conversion: tests/gate/db/test_partition_pairs.py."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from gate.db import online_partition, partitions
from gate.stats.policy import Policy
from gate.verdicts.service import compute
from tests import factories
from tests.gate.stats.test_sql import START, recorded_pairs, store
from tests.plans import explain, statements

pytestmark = pytest.mark.postgres
DAY = 86_400
DAYS = [START + timedelta(days=d) for d in (-3, -2, -1, 0)]
# The stage's pairs start at midnight: its bound (`SINCE_SLACK` before) reaches the day
# before; the days before that are never read.
OLDER = {partitions.partition_name("pairs", day) for day in DAYS[:-2]}


@pytest.fixture
def engine(fresh_pg_engine: Engine) -> Engine:
    return fresh_pg_engine


def partition_by_day(engine: Engine, table: str, column: str, days: list[datetime]) -> None:
    """Partition the (empty) `table` a day a partition, with one for each of `days` too
    (as a conversion makes for stored rows; bench/pairs_partitions.py does the same)."""
    online_partition.convert(engine, table, period=DAY, echo=lambda _line: None)
    with engine.begin() as conn:
        have = {start for _, start, _ in partitions.partitions(conn, table)}
        for day in (d for d in days if d not in have):
            partitions.create_partition(conn, table, column, day, DAY)


def partition_pairs(engine: Engine, days: list[datetime]) -> None:
    partition_by_day(engine, "pairs", "created_at", days)


def fold_reads(session: Session, rollout, needle: str) -> list[tuple[str, str]]:
    """Judge `rollout` and return each statement it ran that names `needle`, with its
    EXPLAIN plan."""
    conn = session.connection()
    with statements(conn, needle) as seen:
        verdict = compute(session, rollout=rollout, policy=Policy())
    assert verdict.n_pairs > 0
    return [(statement, explain(conn, statement, parameters)) for statement, parameters in seen]


def older_rollout_pairs(session: Session, n: int) -> None:
    """Store `n` pairs of another rollout in the days before the stage: rows the table
    grows by, none the stage's."""
    older = factories.rollout(session, name="older")
    session.execute(
        text(
            "INSERT INTO pairs (id, rollout_id, stage, state, is_control, segment, created_at, "
            "deadline, evaluated_at) SELECT gen_random_uuid(), :r, 0, 'complete', false, "
            "'chat', :t + i * interval '1 minute', :t, :t + i * interval '1 minute' "
            "FROM generate_series(0, :n - 1) AS i"
        ),
        {"r": older.id, "t": DAYS[0], "n": n},
    )


def test_the_fold_on_partitioned_pairs_reads_only_the_stage_window(engine: Engine) -> None:
    partition_pairs(engine, DAYS)
    with Session(engine) as session:
        rollout = factories.rollout(session)
        store(session, recorded_pairs(), rollout.id)
        older_rollout_pairs(session, 3 * 24 * 60 - 1)  # three days, a pair a minute
        session.commit()
        seen = fold_reads(session, rollout, "FROM pairs")
        # The fold's reads of the stage's pairs: those in fold order (`gate.verdicts.slices`).
        folded = [s for s in seen if "(evaluated_at, id)" in s[0] or "evaluated_at DESC" in s[0]]
        assert len(folded) >= 3
        for statement, plan in folded:
            assert partitions.partition_name("pairs", DAYS[-1]) in plan, statement
            assert not [name for name in OLDER if name in plan], statement


def test_a_look_probes_every_partition_for_the_stage_start_once(engine: Engine) -> None:
    """The one read no time bound prunes (`stage_since`: the stage's first pair) is planned
    over every partition, so with hourly partitions each run costs ~0.1 s of planning
    (BENCHMARKS.md, issue 43): a look runs it once, and its later reads reuse it."""
    partition_pairs(engine, DAYS)
    with Session(engine) as session:
        rollout = factories.rollout(session)
        store(session, recorded_pairs(), rollout.id)
        session.commit()
        seen = fold_reads(session, rollout, "min(created_at) FROM pairs")
    assert rollout.stage == 0  # its first stage is the rollout's too: one probe serves both
    assert len(seen) == 1


def calls_follow_their_pairs(session: Session) -> None:
    """Start each stored call a second after its pair, as a gateway's do (and so its
    evaluations, which carry their call's start)."""
    session.execute(
        text(
            "UPDATE generations g SET started_at = p.created_at + interval '1 second' "
            "FROM pairs p WHERE p.id = g.pair_id"
        )
    )
    session.execute(
        text(
            "UPDATE evaluations e SET generation_started_at = g.started_at "
            "FROM generations g WHERE g.id = e.generation_id"
        )
    )


def test_the_fold_reads_only_the_stage_window_of_partitioned_generations(engine: Engine) -> None:
    partition_pairs(engine, DAYS)
    partition_by_day(engine, "generations", "started_at", DAYS)
    with Session(engine) as session:
        rollout = factories.rollout(session)
        store(session, recorded_pairs(), rollout.id)
        calls_follow_their_pairs(session)
        session.commit()
        seen = fold_reads(session, rollout, "generations")
        older = {partitions.partition_name("generations", day) for day in DAYS[:-2]}
        assert len(seen) >= 3
        for statement, plan in seen:
            if "pair_id" in statement:  # the fold's joins; availability reads from the start
                assert partitions.partition_name("generations", DAYS[-1]) in plan, statement
            assert not [name for name in older if name in plan], statement


def test_a_later_stage_looks_back_at_the_rollouts_own_days_only(engine: Engine) -> None:
    # Stage 1's `opens` asks whether an episode began in stage 0 (issue 39): that look is
    # bounded by the rollout's first pair, so the days before the rollout are never read.
    partition_pairs(engine, DAYS)
    with Session(engine) as session:
        rollout = factories.rollout(session)
        earlier = []
        for i, record in enumerate(recorded_pairs()[:300]):
            record["episode"] = f"conv-{i % 40}"
            for key in ("created_at", "evaluated_at"):
                moved = datetime.fromisoformat(record[key]) - timedelta(hours=36)
                record[key] = moved.isoformat()
            earlier.append(record)
        later = [
            {**r, "stage": 1, "episode": f"conv-{i % 80}"} for i, r in enumerate(recorded_pairs())
        ]
        store(session, earlier + later, rollout.id)
        rollout.stage = 1
        older_rollout_pairs(session, 3 * 24 * 60 - 1)
        session.commit()
        seen = fold_reads(session, rollout, "pairs e")
        assert seen
        # Stage 0's day is read (by the queries that ask `opens`); the day before, never.
        stage0 = partitions.partition_name("pairs", DAYS[1])
        assert any(f"{stage0} e" in plan for _, plan in seen)
        before = partitions.partition_name("pairs", DAYS[0])
        for statement, plan in seen:
            assert before not in plan, statement


def test_the_gate_sql_bench_loads_its_pairs_on_the_current_schema(engine: Engine) -> None:
    # bench/gate_sql.py (the 1M-pair verdict, and bench/pairs_partitions.py's rows) COPYs
    # evaluations: each must carry its generation's start, NOT NULL since 0032.
    from bench.gate_sql import load

    with Session(engine) as session:
        rollout_id = factories.rollout(session).id
        session.commit()
    dsn = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    load(dsn, rollout_id, 5, first=0, start=START, seed=0)
    with engine.connect() as conn:
        mismatched = conn.execute(
            text(
                "SELECT count(*) FROM evaluations e JOIN generations g "
                "ON g.id = e.generation_id WHERE g.started_at <> e.generation_started_at"
            )
        ).scalar_one()
        assert conn.execute(text("SELECT count(*) FROM evaluations")).scalar_one() == 10
    assert mismatched == 0
