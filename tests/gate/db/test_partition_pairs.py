"""`specgate db partition pairs` on real Postgres (issue 43): a filled `pairs` converted
online keeps every row and every change made during the copy, a stub and its pair span
land as one row afterwards, and the gate's verdict is the same before and after."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.orm import Session

from collectors.retention import purge
from gate.db import online_partition, partitions, storage
from gate.db.base import utcnow
from gate.db.models import Rollout
from gate.db.rows import PairRow
from gate.rollouts import service
from gate.rollouts.states import Action
from gate.settings import CollectorSettings
from gate.stats.policy import Policy
from gate.verdicts.service import compute
from tests import factories
from tests.gate.stats.test_sql import START, recorded_pairs, store
from tests.gate.verdicts.test_folds import assert_same_verdict
from tests.waits import wait_until

pytestmark = pytest.mark.postgres
DAY = 86_400
QUIET = lambda _line: None  # noqa: E731


@pytest.fixture
def engine(fresh_pg_engine: Engine) -> Engine:
    return fresh_pg_engine


def filled(engine: Engine) -> int:
    """Store 900 evaluated pairs with their generations and evaluations; return the rollout."""
    with Session(engine) as session:
        rollout_id = factories.rollout(session).id
        store(session, recorded_pairs(), rollout_id)
        session.commit()
    return rollout_id


def verdict(engine: Engine, rollout_id: int):
    with Session(engine) as session:
        session.execute(text("DELETE FROM gate_folds"))
        rollout = session.get(Rollout, rollout_id)
        assert rollout is not None
        return compute(session, rollout=rollout, policy=Policy())


def rows(engine: Engine, table: str) -> set[tuple[object, ...]]:
    with engine.connect() as conn:
        return {tuple(r) for r in conn.execute(text(f"SELECT * FROM {table}"))}


def pair(rollout_id: int, pair_id: uuid.UUID, *, control: bool = False) -> PairRow:
    return PairRow(
        id=pair_id, rollout_id=rollout_id, request_id=None, stage=0, state="open",
        is_control=control, segment="chat", episode=None, arm=None, pair_span=True,
        created_at=START + timedelta(hours=1), deadline=START + timedelta(hours=2),
    )  # fmt: skip


def land(engine: Engine, *, pairs: list[PairRow], stubs: list[PairRow]) -> None:
    with engine.begin() as conn:
        storage.of(engine).upsert_pairs(conn, pairs)
        storage.of(engine).insert_pair_stubs(conn, stubs)


def test_a_filled_pairs_converts_online_with_every_row_and_change(engine: Engine) -> None:
    rollout_id = filled(engine)
    with engine.connect() as conn:
        ids = list(conn.execute(text("SELECT id FROM pairs ORDER BY id")).scalars())
    with engine.begin() as conn:
        online_partition._prepare(conn, "pairs", DAY, echo=QUIET)
    early, late = uuid.uuid4(), uuid.uuid4()
    land(engine, pairs=[], stubs=[pair(rollout_id, early)])  # mirrored, before the copy

    def during(_line: str) -> None:  # after each batch: change rows copied and not yet
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE pairs SET requeues = requeues + 1 WHERE id IN (:a, :b)"),
                {"a": ids[0], "b": ids[-1]},
            )

    online_partition._copy(engine, "pairs", 100, echo=during)
    land(engine, pairs=[pair(rollout_id, early)], stubs=[pair(rollout_id, late)])
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM pairs WHERE id = :a"), {"a": ids[1]})
    want = verdict(engine, rollout_id)  # on the unpartitioned table, changes made
    with engine.begin() as conn:
        online_partition._swap(conn, "pairs")
    # Every row, with every change made while the copy ran, and nothing else.
    assert rows(engine, "pairs") == rows(engine, "pairs_unpartitioned")
    with engine.connect() as conn:
        assert partitions.period_s(conn, "pairs") == DAY
        assert conn.execute(text("SELECT count(*) FROM pairs")).scalar_one() == len(ids) + 1
        counts = conn.execute(
            text("SELECT requeues, count(*) FROM pairs GROUP BY requeues ORDER BY requeues")
        ).all()
        assert counts[-1][0] > 1 and counts[-1][1] == 2  # both, once per batch
        referrers = conn.execute(
            text("SELECT count(*) FROM pg_constraint WHERE confrelid = 'pairs'::regclass")
        ).scalar_one()
        assert referrers == 0  # generations.pair_id no longer points at the old table
    assert_same_verdict(verdict(engine, rollout_id), want)


def test_a_stub_and_its_pair_land_as_one_row_on_partitioned_pairs(engine: Engine) -> None:
    rollout_id = filled(engine)
    online_partition.convert(engine, "pairs", period=DAY, echo=QUIET)
    first, second = uuid.uuid4(), uuid.uuid4()
    land(engine, pairs=[], stubs=[pair(rollout_id, first), pair(rollout_id, second)])
    land(engine, pairs=[pair(rollout_id, first)], stubs=[pair(rollout_id, second, control=True)])
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT id, is_control FROM pairs WHERE id IN (:a, :b) ORDER BY is_control"),
            {"a": first, "b": second},
        ).all()
    assert found == [(first, False), (second, True)]


def old_pairs(engine: Engine, rollout_id: int, days_ago: float, n: int = 10) -> None:
    """Store `n` evaluated pairs of a rollout created `days_ago` days back, a minute apart."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO pairs (id, rollout_id, stage, state, is_control, segment, "
                "created_at, deadline) SELECT gen_random_uuid(), :r, 0, 'complete', false, "
                "'chat', :t + i * interval '1 minute', :t FROM generate_series(1, :n) AS i"
            ),
            {"r": rollout_id, "t": utcnow() - timedelta(days=days_ago), "n": n},
        )


def kept(engine: Engine) -> dict[int, int]:
    with engine.connect() as conn:
        found = conn.execute(text("SELECT rollout_id, count(*) FROM pairs GROUP BY 1")).all()
    return {rollout: count for rollout, count in found}


def test_retention_drops_old_pairs_partitions_but_none_of_a_rollout_not_ended(
    engine: Engine,
) -> None:
    with Session(engine) as session:
        ended, live, recent = (factories.rollout(session, name=n) for n in ("a", "b", "c"))
        ended.ended_at = utcnow() - timedelta(days=91)  # ended before the retention age
        ids = ended.id, live.id, recent.id
        session.commit()
    old_pairs(engine, ids[0], days_ago=100)
    old_pairs(engine, ids[1], days_ago=95)  # a rollout running for 95 days
    old_pairs(engine, ids[2], days_ago=1)
    settings = CollectorSettings(retention_pairs_days=90)
    purge(engine, settings)
    assert kept(engine) == {ids[0]: 10, ids[1]: 10, ids[2]: 10}  # unpartitioned: all kept
    online_partition.convert(engine, "pairs", period=DAY, echo=QUIET)
    dropped = purge(engine, settings).partitions_dropped
    assert kept(engine) == {ids[1]: 10, ids[2]: 10}
    assert dropped and all(name.startswith("pairs_p") for name in dropped)
    with engine.begin() as conn:
        conn.execute(text("UPDATE rollouts SET ended_at = now() WHERE id = :r"), {"r": ids[1]})
    purge(engine, settings)  # ended now: kept for the retention age (it may be resumed)
    assert kept(engine) == {ids[1]: 10, ids[2]: 10}
    with engine.begin() as conn:
        sql = "UPDATE rollouts SET ended_at = now() - interval '91 days' WHERE id = :r"
        conn.execute(text(sql), {"r": ids[1]})
    purge(engine, settings)
    assert kept(engine) == {ids[2]: 10}


def test_the_command_converts_pairs_only_when_named(engine: Engine, empty_pg_url: str) -> None:
    def specgate(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "gate", "db", "partition", *args],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "SPECGATE_DATABASE_URL": empty_pg_url},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    specgate()  # the default: spans and engine_samples
    with engine.connect() as conn:
        assert partitions.period_s(conn, "spans") == DAY
        assert partitions.period_s(conn, "pairs") is None
    assert "pairs: swapped" in specgate("pairs")
    with engine.connect() as conn:
        assert partitions.period_s(conn, "pairs") == DAY


def test_retention_keeps_the_pairs_of_a_killed_rollout_that_is_resumed(engine: Engine) -> None:
    with Session(engine) as session:
        rollout_id = factories.rollout(session, name="long").id
        session.commit()
    with Session(engine) as session:
        service.transition(
            session, rollout_id=rollout_id, action=Action.START, actor="t", reason=""
        )
        session.commit()
    old_pairs(engine, rollout_id, days_ago=95)  # a rollout running for 95 days
    old_pairs(engine, rollout_id, days_ago=1)
    online_partition.convert(engine, "pairs", period=DAY, echo=QUIET)
    settings = CollectorSettings(retention_pairs_days=90)
    purge(engine, settings)
    assert kept(engine) == {rollout_id: 20}  # running: every pair kept
    # The kill switch (an operator's, or the gate's own), retention's next turn, a resume.
    for action in (Action.KILL, Action.RESUME):
        with Session(engine) as session:
            service.transition(session, rollout_id=rollout_id, action=action, actor="t", reason="")
            session.commit()
        if action is Action.KILL:
            purge(engine, settings)
    with Session(engine) as session:
        rollout = session.get(Rollout, rollout_id)
        assert rollout is not None and rollout.ended_at is None  # running again
    assert kept(engine) == {rollout_id: 20}


@pytest.mark.parametrize("write", ["update", "pair span"])
def test_a_write_waiting_on_a_partition_s_creation_changes_its_pair(
    engine: Engine, write: str
) -> None:
    """A pair in the default partition (its range not made yet: the periodic job was down,
    or a gateway's clock runs ahead) is moved when its partition is made; a write of it
    waiting behind that move (the worker's update, the collector's upsert) must land."""
    rollout_id = filled(engine)
    online_partition.convert(engine, "pairs", period=DAY, echo=QUIET)
    later = partitions.floor(utcnow() + timedelta(days=10), DAY)
    moved = pair(rollout_id, uuid.uuid4())
    moved["created_at"] = later + timedelta(hours=1)
    land(engine, pairs=[], stubs=[moved])
    statement = "UPDATE pairs" if write == "update" else "INSERT INTO pairs"

    def change() -> None:
        with engine.begin() as conn:
            if write == "update":
                conn.execute(
                    text("UPDATE pairs SET episode = 'changed' WHERE id = :id"),
                    {"id": moved["id"]},
                )
            else:
                storage.of(engine).upsert_pairs(conn, [{**moved, "episode": "changed"}])

    with engine.begin() as conn:
        partitions.create_partition(conn, "pairs", "created_at", later, DAY)
        waiter = threading.Thread(target=change)
        waiter.start()
        with engine.connect() as probe:
            waits = text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND starts_with(query, :q)"
            )

            def waiting() -> int:
                try:
                    return int(probe.execute(waits, {"q": statement}).scalar_one())
                finally:
                    # pg_stat_activity is read once per transaction: a fresh one per look,
                    # or a first look taken before the write started is seen for good.
                    probe.rollback()

            assert wait_until(waiting, 30), "the write never waited on the partition's creation"
    waiter.join(30)
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT tableoid::regclass::text, episode FROM pairs WHERE id = :id"),
            {"id": moved["id"]},
        ).all()
    assert found == [(partitions.partition_name("pairs", later), "changed")]


def test_the_conversion_makes_its_partitions_one_a_transaction(engine: Engine) -> None:
    """Each partition made holds some 30 locks until its transaction ends; made all in one,
    a `pairs` kept for months (never deleted unpartitioned) can run the server out of its
    shared lock table ("out of shared memory", sized by `max_locks_per_transaction`): this
    file's 580 daily partitions did, with other sessions busy."""
    rollout_id = filled(engine)
    old_pairs(engine, rollout_id, days_ago=30)
    attached = [0]
    most = [0]

    def count(_conn, _cursor, statement, *_args) -> None:
        if "ATTACH PARTITION" in statement:
            attached[0] += 1
            most[0] = max(most[0], attached[0])

    def commit(_conn) -> None:
        attached[0] = 0

    event.listen(engine, "before_cursor_execute", count)
    event.listen(engine, "commit", commit)
    try:
        done = online_partition.convert(engine, "pairs", period=DAY, echo=QUIET)
    finally:
        event.remove(engine, "before_cursor_execute", count)
        event.remove(engine, "commit", commit)
    assert done.partitions > 30 and most[0] == 1
    with engine.connect() as conn:
        assert partitions.default_rows(conn, "pairs") == 0
