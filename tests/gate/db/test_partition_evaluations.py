"""`specgate db partition evaluations` on real Postgres (issue 43): a filled `evaluations`
converted online keeps every row and every write made during the copy, the gate's verdict
is the same before and after, a retried evaluation task still stores each row once, and
retention drops evaluations partitions with their generations' instead of deleting rows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.orm import Session

from collectors.retention import purge
from gate.db import online_partition, partitions
from gate.db.base import utcnow
from gate.pairs.export import pair_records
from gate.settings import CollectorSettings
from tests import factories
from tests.evaluators.test_service import (
    test_running_twice_stores_each_evaluation_once as retried_twice,
)
from tests.gate.db.test_partition_generations import generation, land
from tests.gate.db.test_partition_pairs import QUIET, filled, verdict
from tests.gate.stats.test_sql import recorded_pairs, store
from tests.gate.verdicts.test_folds import assert_same_verdict
from tests.gate.verdicts.test_partitioned_pairs import (
    DAYS,
    calls_follow_their_pairs,
    fold_reads,
    partition_by_day,
)
from tests.plans import explain, statements

pytestmark = pytest.mark.postgres
DAY = 86_400
# Each evaluation against its generation: the partition key is a copy of its start.
_MISMATCHED = """SELECT count(*) FROM evaluations e LEFT JOIN generations g
  ON g.id = e.generation_id AND g.started_at = e.generation_started_at WHERE g.id IS NULL"""


@pytest.fixture
def engine(fresh_pg_engine: Engine) -> Engine:
    return fresh_pg_engine


def rows(engine: Engine, table: str) -> list[str]:
    """Every row of `table`, as text (a JSON column is no set member)."""
    with engine.connect() as conn:
        return [str(tuple(r)) for r in conn.execute(text(f"SELECT * FROM {table} ORDER BY id"))]


def count(engine: Engine, query: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(query)).scalar_one())


def test_a_filled_evaluations_converts_online_with_every_row_and_write(engine: Engine) -> None:
    rollout_id = filled(engine)
    other = land(engine, [generation(factories_rollout(engine), utcnow())])
    before = count(engine, "SELECT count(*) FROM evaluations")
    want = verdict(engine, rollout_id)
    written: list[str] = []

    def during(line: str) -> None:  # after each batch the workers go on writing: another
        if "copied" not in line or len(written) >= 3:  # rollout's, so the verdict stays
            return
        written.append(f"late{len(written)}")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO evaluations (generation_id, generation_started_at, evaluator, "
                    "version, details, created_at) SELECT id, started_at, :e, '1', '{}', now() "
                    "FROM generations WHERE rollout_id <> :r"
                ),
                {"e": written[-1], "r": rollout_id},
            )
            conn.execute(text("""UPDATE evaluations SET details = '{"late": 1}' WHERE id = 1"""))

    done = online_partition.convert(engine, "evaluations", period=DAY, batch=500, echo=during)
    total = count(engine, "SELECT count(*) FROM evaluations")
    assert other == 1 and written and done.swapped
    assert done.copied == before + len(written) == total
    assert rows(engine, "evaluations") == rows(engine, "evaluations_unpartitioned")
    assert count(engine, "SELECT count(*) FROM evaluations WHERE details ? 'late'") == 1
    assert count(engine, _MISMATCHED) == 0
    with engine.connect() as conn:
        assert partitions.period_s(conn, "evaluations") == DAY
    assert_same_verdict(verdict(engine, rollout_id), want)


def factories_rollout(engine: Engine) -> int:
    with Session(engine) as session:
        rollout_id = factories.rollout(session, name="other").id
        session.commit()
    return rollout_id


def test_a_retried_evaluation_task_stores_each_row_once_when_partitioned(engine: Engine) -> None:
    online_partition.convert(engine, "evaluations", period=DAY, echo=QUIET)
    with Session(engine) as session:
        retried_twice(session)
        session.commit()
    assert count(engine, "SELECT count(*) FROM evaluations_default") == 0
    assert count(engine, _MISMATCHED) == 0


def test_retention_drops_evaluations_partitions_with_their_generations(engine: Engine) -> None:
    with Session(engine) as session:
        ended, live = (factories.rollout(session, name=n) for n in ("a", "b"))
        ended.ended_at = utcnow() - timedelta(days=91)
        ids = ended.id, live.id
        session.commit()
    now = utcnow()
    land(engine, [generation(ids[0], now - timedelta(days=100)) for _ in range(3)])
    land(engine, [generation(ids[1], now - timedelta(days=95)) for _ in range(2)])
    land(engine, [generation(ids[0], now - timedelta(days=8)) for _ in range(2)])
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO evaluations (generation_id, generation_started_at, evaluator, "
                "version, details, created_at) SELECT id, started_at, 'e' || k, '1', '{}', "
                "now() FROM generations, generate_series(1, 3) k"
            )
        )
    for table in ("generations", "evaluations"):
        online_partition.convert(engine, table, period=DAY, echo=QUIET)
    deletes: list[str] = []

    def note(*args: Any) -> None:
        if args[2].startswith("DELETE FROM evaluations WHERE"):  # by the dropped generations
            deletes.append(args[2])

    event.listen(engine, "before_cursor_execute", note)
    try:
        dropped = purge(engine, CollectorSettings(retention_pairs_days=90)).partitions_dropped
    finally:
        event.remove(engine, "before_cursor_execute", note)
    assert any(name.startswith("evaluations_p") for name in dropped)
    assert any(name.startswith("generations_p") for name in dropped)
    assert deletes == []  # whole partitions, not rows
    # The live rollout's (95 days) and the recent ones stay, three evaluations each.
    assert count(engine, "SELECT count(*) FROM evaluations") == 3 * 4
    assert count(engine, _MISMATCHED) == 0


def test_the_fold_and_the_export_read_only_the_stage_window_of_evaluations(
    engine: Engine,
) -> None:
    partition_by_day(engine, "evaluations", "generation_started_at", DAYS)
    older = [partitions.partition_name("evaluations", day) for day in DAYS[:-2]]
    with Session(engine) as session:
        rollout = factories.rollout(session)
        store(session, recorded_pairs(), rollout.id)
        calls_follow_their_pairs(session)
        session.commit()
        reads = fold_reads(session, rollout, "evaluations")
        conn = session.connection()
        with statements(conn, "FROM evaluations") as seen:
            records = list(pair_records(session, rollout_id=rollout.id))
        assert records and records[0]["baseline"]["evals"]
        reads += [(s, explain(conn, s, p)) for s, p in seen]
    assert len(reads) >= 2
    for statement, plan in reads:
        assert partitions.partition_name("evaluations", DAYS[-1]) in plan, statement
        assert not [name for name in older if name in plan], statement


def test_generations_convert_after_evaluations_keeping_every_evaluation(engine: Engine) -> None:
    # A partitioned `evaluations` keeps its foreign key into an unpartitioned `generations`
    # (the conversion copies it), and that key goes when `generations` is converted next.
    rollout_id = filled(engine)
    before = rows(engine, "evaluations")
    online_partition.convert(engine, "evaluations", period=DAY, echo=QUIET)
    with engine.connect() as conn:
        keys = "SELECT count(*) FROM pg_constraint WHERE confrelid = 'generations'::regclass"
        assert conn.execute(text(keys + " AND conrelid = 'evaluations'::regclass")).scalar() == 1
    want = verdict(engine, rollout_id)
    online_partition.convert(engine, "generations", period=DAY, echo=QUIET)
    assert rows(engine, "evaluations") == before
    assert count(engine, _MISMATCHED) == 0
    assert_same_verdict(verdict(engine, rollout_id), want)


def test_evaluations_partitioned_alone_keep_the_rows_of_generations_kept(engine: Engine) -> None:
    # Converted before `generations` (as the test above allows): an unpartitioned
    # `generations` keeps every row, so its evaluations must stay with them, not drop on
    # their own cut and leave an ended rollout's calls without their results.
    with Session(engine) as session:
        ended = factories.rollout(session, name="a")
        ended.ended_at = utcnow() - timedelta(days=91)
        rollout_id = ended.id
        session.commit()
    land(engine, [generation(rollout_id, utcnow() - timedelta(days=100)) for _ in range(2)])
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO evaluations (generation_id, generation_started_at, evaluator, "
                "version, details, created_at) SELECT id, started_at, 'e', '1', '{}', now() "
                "FROM generations"
            )
        )
    online_partition.convert(engine, "evaluations", period=DAY, echo=QUIET)
    # One straggler in the default partition too (older than every partition made).
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO evaluations (generation_id, generation_started_at, evaluator, "
                "version, details, created_at) SELECT id, started_at - interval '30 days', "
                "'late', '1', '{}', now() FROM generations ORDER BY id LIMIT 1"
            )
        )
    result = purge(engine, CollectorSettings(retention_pairs_days=90))
    assert not [n for n in result.partitions_dropped if n.startswith("evaluations")]
    assert result.defaults_deleted == 0
    assert count(engine, "SELECT count(*) FROM generations") == 2
    assert count(engine, "SELECT count(*) FROM evaluations") == 3
