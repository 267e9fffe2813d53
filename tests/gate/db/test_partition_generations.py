"""`specgate db partition generations` on real Postgres (issue 43): a filled `generations`
converted online keeps every row and every change made during the copy, a re-sent call span
lands once, vLLM's facts still join their generation exactly, retention drops whole
partitions (and the evaluations and feedback of their rows), and the gate's verdict is
the same before and after."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.orm import Session

from collectors.retention import purge
from gate.db import online_partition, partitions, storage
from gate.db.base import utcnow
from gate.db.rows import EngineFacts, GenerationRow
from gate.errors import ConfigError
from gate.settings import CollectorSettings
from tests import factories
from tests.gate.db.test_partition_pairs import QUIET, filled, rows, verdict
from tests.gate.verdicts.test_folds import assert_same_verdict

pytestmark = pytest.mark.postgres
DAY = 86_400


@pytest.fixture
def engine(fresh_pg_engine: Engine) -> Engine:
    return fresh_pg_engine


def generation(rollout_id: int, started_at: datetime, **fields: object) -> GenerationRow:
    """A route call's generation as the collector writes it (its span's key and start)."""
    row = dict.fromkeys(GenerationRow.__annotations__)
    row.update(
        rollout_id=rollout_id, cohort="baseline", segment="chat", stream=False, status="ok",
        trace_id=uuid.uuid4().hex, span_id=uuid.uuid4().hex[:16], started_at=started_at,
    )  # fmt: skip
    row.update(fields)
    return row  # type: ignore[return-value]


def land(engine: Engine, generations: list[GenerationRow]) -> int:
    with engine.begin() as conn:
        return len(storage.of(engine).insert_generations(conn, generations))


def referrers(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        query = "SELECT count(*) FROM pg_constraint WHERE confrelid = to_regclass(:t)"
        return int(conn.execute(text(query), {"t": table}).scalar_one())


def assert_no_orphans(conn: Connection, kept: int) -> None:
    """Assert that every evaluation and feedback row names a generation still there, and
    that `kept` of each are left."""
    for table in ("evaluations", "feedback"):
        orphans = conn.execute(
            text(
                f"SELECT count(*) FROM {table} t WHERE NOT EXISTS "
                "(SELECT 1 FROM generations g WHERE g.id = t.generation_id)"
            )
        ).scalar_one()
        assert orphans == 0, table
        assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() == kept, table


def test_a_filled_generations_converts_online_with_every_row_and_change(engine: Engine) -> None:
    rollout_id = filled(engine)
    with engine.connect() as conn:
        ids = list(conn.execute(text("SELECT id FROM generations ORDER BY id")).scalars())
    want = verdict(engine, rollout_id)

    def during(line: str) -> None:  # after each batch: change rows copied and not yet
        if "copied" not in line:
            return
        with engine.begin() as conn:
            bump = "UPDATE generations SET queue_s = coalesce(queue_s, 0) + 1 WHERE id IN (:a, :b)"
            conn.execute(text(bump), {"a": ids[0], "b": ids[-1]})
        if len(landed) < 3:  # the collector goes on writing (a few, or the copy never ends)
            landed.append(generation(rollout_id, utcnow()))
            land(engine, landed[-1:])

    landed: list[GenerationRow] = []

    done = online_partition.convert(engine, "generations", period=DAY, batch=200, echo=during)
    assert done.swapped and done.copied == len(ids) + len(landed)
    # Every row, with every change made while the copy ran, and nothing else.
    assert rows(engine, "generations") == rows(engine, "generations_unpartitioned")
    with engine.connect() as conn:
        assert partitions.period_s(conn, "generations") == DAY
        changed = conn.execute(
            text("SELECT count(*) FROM generations WHERE queue_s > 1")
        ).scalar_one()
        assert changed == 2
        total = conn.execute(text("SELECT count(*) FROM generations")).scalar_one()
        assert total == len(ids) + len(landed)
    # evaluations and feedback pointed at `generations.id`, no longer a key of its own.
    assert referrers(engine, "generations") == 0
    assert_same_verdict(verdict(engine, rollout_id), want)
    # Its sequence goes on from the old table's ids, and survives dropping the old table.
    assert online_partition.drop_old(engine, "generations")
    new = land(engine, [generation(rollout_id, utcnow())])
    with engine.connect() as conn:
        assert new == 1
        assert conn.execute(text("SELECT max(id) FROM generations")).scalar_one() > ids[-1]


def test_a_resent_call_span_lands_once_and_vllm_facts_join_exactly(engine: Engine) -> None:
    with Session(engine) as session:
        rollout_id = factories.rollout(session).id
        session.commit()
    online_partition.convert(engine, "generations", period=DAY, echo=QUIET)
    now = utcnow()
    first = generation(rollout_id, now)
    # Another call of the same trace, a day earlier (another partition).
    other = generation(rollout_id, now - timedelta(days=1), trace_id=first["trace_id"])
    assert land(engine, [first, other]) == 2
    assert land(engine, [first, other]) == 0  # re-sent: nothing new
    facts: list[EngineFacts] = [
        {"trace_id": first["trace_id"], "parent_span_id": first["span_id"], "started_at": now,
         "queue_s": 0.5, "input_tokens": 7, "output_tokens": 9}
    ]  # fmt: skip
    with engine.begin() as conn:
        storage.of(engine).fill_engine_facts(conn, facts)
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT span_id, queue_s, input_tokens FROM generations ORDER BY started_at")
        ).all()
    assert found == [(other["span_id"], None, None), (first["span_id"], 0.5, 7)]


def test_retention_drops_old_generations_partitions_with_their_evaluations(
    engine: Engine,
) -> None:
    with Session(engine) as session:
        ended, live = (factories.rollout(session, name=n) for n in ("a", "b"))
        ended.ended_at = utcnow() - timedelta(days=91)
        ids = ended.id, live.id
        session.commit()
    now = utcnow()
    old = [generation(ids[0], now - timedelta(days=100), output="kept?") for _ in range(3)]
    running = [generation(ids[1], now - timedelta(days=95), output="x") for _ in range(2)]
    recent = [generation(ids[0], now - timedelta(days=8), output="secret") for _ in range(2)]
    land(engine, [*old, *running, *recent])
    rate(engine)
    online_partition.convert(engine, "generations", period=DAY, echo=QUIET)
    settings = CollectorSettings(retention_pairs_days=90, retention_content_days=7)
    result = purge(engine, settings)
    # A rollout running for 95 days keeps its generations; the ended one's old ones go.
    assert any(name.startswith("generations_p") for name in result.partitions_dropped)
    with engine.connect() as conn:
        kept = conn.execute(
            text("SELECT rollout_id, count(*), count(output) FROM generations GROUP BY 1")
        ).all()
        assert sorted(kept) == [(ids[0], 2, 0), (ids[1], 2, 0)]  # content scrubbed at 7 days
        assert_no_orphans(conn, kept=4)


def test_retention_deletes_a_dropped_partitions_evaluations_in_bounded_batches(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A day of generations names hundreds of millions of evaluations (deploy/PRODUCTION.md,
    5,000 a second per 1,000 pairs a second): no one transaction deletes them all."""
    with Session(engine) as session:
        ended = factories.rollout(session)
        ended.ended_at = utcnow() - timedelta(days=91)
        rollout_id = ended.id
        session.commit()
    land(engine, [generation(rollout_id, utcnow() - timedelta(days=100)) for _ in range(7)])
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO evaluations (generation_id, generation_started_at, evaluator, "
                "version, details, created_at) SELECT id, started_at, 'e' || k, '1', '{}', "
                "now() FROM generations, generate_series(1, 3) k"
            )
        )
    online_partition.convert(engine, "generations", period=DAY, echo=QUIET)
    monkeypatch.setattr(partitions, "REFERRED_BATCH", 2, raising=False)
    deleted: list[int] = []

    def count(*args: Any) -> None:
        statement, context = args[2], args[4]
        if statement.startswith("DELETE FROM evaluations"):
            deleted.append(context.rowcount)

    event.listen(engine, "after_cursor_execute", count)
    try:
        dropped = purge(engine, CollectorSettings(retention_pairs_days=90)).partitions_dropped
    finally:
        event.remove(engine, "after_cursor_execute", count)
    assert any(name.startswith("generations_p") for name in dropped)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM evaluations")).scalar_one() == 0
    assert sum(deleted) == 21
    assert max(deleted) <= 2 * 3  # two generations' evaluations a transaction


def rate(engine: Engine) -> None:
    """An evaluation and a rating of every generation (as the worker and the API write them)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO evaluations (generation_id, generation_started_at, evaluator, "
                "version, details, created_at) SELECT id, started_at, 'task', '1', '{}', now() "
                "FROM generations"
            )
        )
        conn.execute(
            text(
                "INSERT INTO feedback (generation_id, escalated, created_at) "
                "SELECT id, false, now() FROM generations"
            )
        )


@pytest.mark.parametrize(
    "with_evaluations", [False, True], ids=["evaluations", "evaluations-partitioned"]
)
def test_retention_deletes_old_rows_of_generations_default_with_what_names_them(
    engine: Engine, with_evaluations: bool
) -> None:
    """A generation written with a time older than the oldest partition waits in
    `generations_default`: past the age it goes in batches with its evaluations and ratings,
    unless its rollout is live."""
    with Session(engine) as session:
        ended, live = (factories.rollout(session, name=n) for n in ("a", "b"))
        ended.ended_at = utcnow() - timedelta(days=91)
        ids = ended.id, live.id
        session.commit()
    online_partition.convert(engine, "generations", period=DAY, echo=QUIET)
    if with_evaluations:
        online_partition.convert(engine, "evaluations", period=DAY, echo=QUIET)
    now = utcnow()
    land(engine, [generation(ids[0], now - timedelta(days=110)) for _ in range(3)])
    land(engine, [generation(ids[1], now - timedelta(days=100)) for _ in range(2)])
    land(engine, [generation(ids[0], now - timedelta(days=8))])
    rate(engine)
    with engine.connect() as conn:
        held = conn.execute(text("SELECT count(*) FROM generations_default")).scalar_one()
    assert held == 6  # before every partition
    settings = CollectorSettings(
        retention_pairs_days=90, retention_content_days=7, retention_batch_rows=2
    )
    purge(engine, settings)
    with engine.connect() as conn:
        kept = conn.execute(text("SELECT rollout_id, count(*) FROM generations GROUP BY 1")).all()
        assert dict(kept) == {ids[0]: 1, ids[1]: 2}
        assert_no_orphans(conn, kept=3)


def test_a_foreign_key_no_layout_accounts_for_refuses_the_conversion_before_copying(
    engine: Engine,
) -> None:
    # A key into `generations` that its layout neither deletes with a dropped partition
    # (`referrers`) nor lets age out on its own (`ages_with`) would go at the swap, and its
    # rows would outlive their generations unnoticed: refused, before anything is built.
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE annotations (id serial PRIMARY KEY, generation_id integer "
                "REFERENCES generations (id))"
            )
        )
    with pytest.raises(ConfigError, match=r"annotations\.generation_id"):
        online_partition.convert(engine, "generations", period=DAY, echo=lambda _line: None)
    with engine.connect() as conn:
        assert partitions.period_s(conn, "generations") is None
        made = conn.execute(text("SELECT to_regclass('generations_partitioned')")).scalar()
        assert made is None
