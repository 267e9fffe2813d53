"""`specgate db partition requests` on real Postgres (issue 43): a filled `requests`
converted online keeps every row, a re-sent pair span writes its request once, the export
finds each pair's request reading only the pages' partitions, and retention drops whole
partitions but none of a live rollout."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from collectors.retention import purge
from gate.db import online_partition, partitions, storage
from gate.db.base import utcnow
from gate.db.rows import PairRow, RequestRow
from gate.pairs.export import pair_records
from gate.settings import CollectorSettings
from tests import factories
from tests.gate.db.test_partition_pairs import QUIET
from tests.plans import explain, statements

pytestmark = pytest.mark.postgres
DAY = 86_400


@pytest.fixture
def engine(fresh_pg_engine: Engine) -> Engine:
    return fresh_pg_engine


def request(rollout_id: int, created_at: datetime) -> RequestRow:
    return RequestRow(
        id=uuid.uuid4(), rollout_id=rollout_id, endpoint="chat", body={"messages": []},
        inputs={}, truncated=None, segment="chat", tenant=None, inflight_baseline=0,
        inflight_candidate=0, gateway_replica=None, episode=None, episode_source=None,
        created_at=created_at,
    )  # fmt: skip


def pair_of(kept: RequestRow) -> PairRow:
    """The pair written from the same pair span: its request's id and start."""
    assert kept["rollout_id"] is not None
    return PairRow(
        id=uuid.uuid4(), rollout_id=kept["rollout_id"], request_id=kept["id"], stage=0,
        state="complete", is_control=False, segment="chat", episode=None, arm=None, pair_span=True,
        created_at=kept["created_at"], deadline=kept["created_at"] + timedelta(minutes=5),
    )  # fmt: skip


def land(engine: Engine, requests: list[RequestRow], *, with_pairs: bool = True) -> None:
    with engine.begin() as conn:
        storage.of(engine).insert_requests(conn, requests)
        if with_pairs:
            storage.of(engine).upsert_pairs(conn, [pair_of(r) for r in requests])


def rows(engine: Engine, table: str) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(f"SELECT * FROM {table} ORDER BY id"))]


def counts(engine: Engine) -> dict[int, int]:
    with engine.connect() as conn:
        found = conn.execute(text("SELECT rollout_id, count(*) FROM requests GROUP BY 1")).all()
    return {rollout: count for rollout, count in found}


def test_a_filled_requests_converts_online_and_a_resent_span_lands_once(
    engine: Engine,
) -> None:
    with Session(engine) as session:
        rollout_id = factories.rollout(session).id
        session.commit()
    now = utcnow()
    stored = [request(rollout_id, now - timedelta(hours=7 * i)) for i in range(40)]
    land(engine, stored)
    done = online_partition.convert(engine, "requests", period=DAY, batch=7, echo=QUIET)
    assert done.swapped and done.copied == len(stored)
    assert rows(engine, "requests") == rows(engine, "requests_unpartitioned")
    with engine.connect() as conn:
        assert partitions.period_s(conn, "requests") == DAY
        referrers = "SELECT count(*) FROM pg_constraint WHERE confrelid = 'requests'::regclass"
        assert conn.execute(text(referrers)).scalar_one() == 0  # pairs.request_id went
    land(engine, stored[:5], with_pairs=False)  # re-sent pair spans
    assert counts(engine) == {rollout_id: len(stored)}


def test_the_export_finds_requests_reading_only_the_pages_partitions(engine: Engine) -> None:
    with Session(engine) as session:
        rollout_id = factories.rollout(session).id
        session.commit()
    online_partition.convert(engine, "requests", period=DAY, echo=QUIET)
    now = utcnow()
    days = [partitions.floor(now - timedelta(days=d), DAY) for d in (3, 2, 1)]
    with engine.begin() as conn:
        for day in days:
            partitions.create_partition(conn, "requests", "created_at", day, DAY)
    # Older requests (of this rollout, whose pairs are gone, and of another): rows the
    # table grows by that the export of the recent pairs never needs.
    other = factories_rollout(engine, "other")
    older = [request(rollout_id, day + timedelta(hours=1)) for day in days]
    land(engine, [*older, request(other, days[0] + timedelta(hours=2))], with_pairs=False)
    land(engine, [request(rollout_id, now - timedelta(minutes=m)) for m in (1, 2)])
    with Session(engine) as session:
        conn = session.connection()
        with statements(conn, "FROM requests") as seen:
            records = list(pair_records(session, rollout_id=rollout_id, with_requests=True))
        assert sorted(r["request"]["body"] is not None for r in records) == [True, True]
        assert seen
        for statement, parameters in seen:
            plan = explain(conn, statement, parameters)
            assert not [d for d in days if partitions.partition_name("requests", d) in plan]


def factories_rollout(engine: Engine, name: str) -> int:
    with Session(engine) as session:
        rollout_id = factories.rollout(session, name=name).id
        session.commit()
    return rollout_id


def test_retention_drops_old_requests_partitions_but_none_of_a_live_rollout(
    engine: Engine,
) -> None:
    ended, live = factories_rollout(engine, "a"), factories_rollout(engine, "b")
    with engine.begin() as conn:
        sql = "UPDATE rollouts SET ended_at = now() - interval '91 days' WHERE id = :r"
        conn.execute(text(sql), {"r": ended})
    now = utcnow()
    land(engine, [request(ended, now - timedelta(days=100)) for _ in range(3)])
    land(engine, [request(live, now - timedelta(days=95)) for _ in range(2)])
    land(engine, [request(ended, now - timedelta(days=8)) for _ in range(2)])
    settings = CollectorSettings(retention_pairs_days=90, retention_content_days=7)
    purge(engine, settings)
    assert counts(engine) == {ended: 5, live: 2}  # unpartitioned: every row kept
    online_partition.convert(engine, "requests", period=DAY, echo=QUIET)
    dropped = purge(engine, settings).partitions_dropped
    assert any(name.startswith("requests_p") for name in dropped)
    assert counts(engine) == {ended: 2, live: 2}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(body) FROM requests")).scalar_one() == 0


def test_retention_deletes_old_rows_of_the_default_partitions_but_none_of_a_live_rollout(
    engine: Engine,
) -> None:
    """Rows outside every partition (written with a time older than the oldest one) wait
    in `pairs_default` and `requests_default`: past the age they go in batches, as spans'."""
    ended, live = factories_rollout(engine, "a"), factories_rollout(engine, "b")
    with engine.begin() as conn:
        sql = "UPDATE rollouts SET ended_at = now() - interval '91 days' WHERE id = :r"
        conn.execute(text(sql), {"r": ended})
    for table in ("pairs", "requests"):
        online_partition.convert(engine, table, period=DAY, echo=QUIET)
    now = utcnow()
    land(engine, [request(ended, now - timedelta(days=110)) for _ in range(3)])
    land(engine, [request(live, now - timedelta(days=100)) for _ in range(2)])
    land(engine, [request(ended, now - timedelta(days=8))])
    with engine.connect() as conn:
        held = conn.execute(text("SELECT count(*) FROM pairs_default")).scalar_one()
    assert held == 6  # before every partition
    settings = CollectorSettings(
        retention_pairs_days=90, retention_content_days=7, retention_batch_rows=2
    )
    assert purge(engine, settings).defaults_deleted == 2 * 3
    assert counts(engine) == {ended: 1, live: 2}
    with engine.connect() as conn:
        pairs = conn.execute(text("SELECT rollout_id, count(*) FROM pairs GROUP BY 1")).all()
    assert dict(pairs) == {ended: 1, live: 2}
