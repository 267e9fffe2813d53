"""The gate's fold on a time-partitioned `pairs` (issue 43): the same verdict, and its
slice queries read only the partitions of the stage's window (EXPLAIN on real Postgres).

`pairs` is rebuilt here in the layout a conversion is to give it (by `created_at`, one
partition a day, a default, key (id, created_at)); `specgate db partition` does not
convert `pairs` yet (docs/architecture.md says what it lacks).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Connection, delete, event, text
from sqlalchemy.orm import Session

from gate.db import partitions
from gate.db.models import GateFold
from gate.stats.policy import Policy
from gate.verdicts.service import compute
from tests import factories
from tests.gate.stats.test_sql import START, recorded_pairs, store
from tests.gate.verdicts.test_folds import assert_same_verdict

pytestmark = pytest.mark.postgres
DAY = 86_400
DAYS = [START + timedelta(days=d) for d in (-3, -2, -1, 0)]
# The stage's pairs start at midnight: its bound (`SINCE_SLACK` before) reaches the day
# before; the days before that are never read.
OLDER = {partitions.partition_name("pairs", day) for day in DAYS[:-2]}


def partition_pairs(conn: Connection, days: list[datetime]) -> None:
    """Rebuild `pairs` partitioned by `created_at`, a partition a day from each of `days`
    and a default, keeping its rows (bench/pairs_partitions.py builds it the same way)."""
    # A partitioned table's unique keys include its partition column: `id` alone is none.
    fk = conn.execute(
        text(
            "SELECT conname FROM pg_constraint WHERE conrelid = 'generations'::regclass "
            "AND confrelid = 'pairs'::regclass"
        )
    ).scalar_one()
    conn.execute(text(f"ALTER TABLE generations DROP CONSTRAINT {fk}"))
    conn.execute(text("ALTER TABLE pairs RENAME TO pairs_plain"))
    conn.execute(
        text(
            "CREATE TABLE pairs (LIKE pairs_plain INCLUDING DEFAULTS) "
            "PARTITION BY RANGE (created_at)"
        )
    )
    conn.execute(text("ALTER TABLE pairs ADD PRIMARY KEY (id, created_at)"))
    for columns in ("rollout_id, stage, created_at", "rollout_id, stage, evaluated_at, id"):
        conn.execute(text(f"CREATE INDEX ON pairs ({columns})"))
    conn.execute(text("CREATE INDEX ON pairs (rollout_id, stage, episode)"))
    conn.execute(text("CREATE TABLE pairs_default PARTITION OF pairs DEFAULT"))
    for day in days:
        partitions.create_partition(conn, "pairs", "created_at", day, DAY)
    conn.execute(text("INSERT INTO pairs SELECT * FROM pairs_plain"))


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


@pytest.fixture
def statements(pg_session: Session) -> Iterator[list[tuple[str, object]]]:
    """Every statement on `pairs` the session runs, with its parameters."""
    seen: list[tuple[str, object]] = []

    def capture(_conn, _cursor, statement, parameters, _context, _many) -> None:
        if "FROM pairs" in statement:
            seen.append((statement, parameters))

    conn = pg_session.connection()
    event.listen(conn, "before_cursor_execute", capture)
    yield seen
    event.remove(conn, "before_cursor_execute", capture)


def test_the_fold_on_partitioned_pairs_gives_the_same_verdict_and_prunes(
    pg_session: Session, statements: list[tuple[str, object]]
) -> None:
    policy = Policy()
    rollout = factories.rollout(pg_session)
    store(pg_session, recorded_pairs(), rollout.id)
    older_rollout_pairs(pg_session, 3 * 24 * 60 - 1)  # three days, a pair a minute
    want = compute(pg_session, rollout=rollout, policy=policy)
    pg_session.execute(delete(GateFold))
    partition_pairs(pg_session.connection(), DAYS)
    statements.clear()
    got = compute(pg_session, rollout=rollout, policy=policy)
    assert_same_verdict(got, want)
    assert got.n_pairs > 0
    conn = pg_session.connection()
    # The fold's reads of the stage's pairs: those in fold order (`gate.verdicts.slices`).
    folded = [s for s in statements if "(evaluated_at, id)" in s[0] or "evaluated_at DESC" in s[0]]
    assert len(folded) >= 3
    for statement, parameters in folded:
        cursor = conn.connection.driver_connection.cursor()
        cursor.execute("EXPLAIN " + statement, parameters)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        assert partitions.partition_name("pairs", DAYS[-1]) in plan, statement
        assert not [name for name in OLDER if name in plan], statement
