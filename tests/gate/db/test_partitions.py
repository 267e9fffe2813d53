"""Time-partitioned `spans` on real Postgres: online conversion, partitions ahead, the
default partition, retention by drop, pruning."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.orm import Session, sessionmaker

from collectors.retention import purge
from gate.db import online_partition, partitions, storage
from gate.db.models import EngineSample
from gate.db.rows import SpanRow
from gate.periodic import maintain_partitions
from gate.routing import crossover
from gate.settings import CollectorSettings
from tests.collectors.factory import make_rollout

HOUR = 3600
NOW = datetime.now(UTC)


@pytest.fixture
def engine(fresh_pg_engine: Engine) -> Engine:
    return fresh_pg_engine


def spans(n: int, start: datetime, step_s: float = 60.0, prefix: str = "a") -> list[SpanRow]:
    """Spans `step_s` apart from `start`, each carrying captured content."""
    return [
        SpanRow(
            trace_id=f"{prefix}{i:031x}",
            span_id=f"{i:016x}",
            parent_span_id=None,
            name="llm.call",
            kind=2,
            start_time=start + timedelta(seconds=step_s * i),
            end_time=start + timedelta(seconds=step_s * i + 1),
            status_code=0,
            status_message=None,
            attributes={"specgate.prompt": "secret", "n": i},
            resource={"service.name": "gw"},
            service="gw",
        )
        for i in range(n)
    ]


def write(engine: Engine, rows: list[SpanRow]) -> int:
    """Store spans the way the collector's writer does; return how many were new."""
    with engine.begin() as conn:
        return storage.of(engine).insert_spans(conn, rows, NOW)


def contents(engine: Engine) -> set[tuple[str, str, datetime]]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT trace_id, span_id, start_time FROM spans")).all()
    return {tuple(r) for r in rows}  # type: ignore[misc]


def convert(engine: Engine, period: int = HOUR, batch: int = 7) -> online_partition.Conversion:
    return online_partition.convert(
        engine, "spans", period=period, batch=batch, echo=lambda _line: None
    )


def test_conversion_keeps_every_row_of_a_filled_database(engine: Engine) -> None:
    rows = spans(50, NOW - timedelta(hours=5))
    assert write(engine, rows) == 50
    before = contents(engine)

    done = convert(engine)

    assert done.copied == 50 and done.swapped
    assert contents(engine) == before
    with engine.connect() as conn:
        assert partitions.period_s(conn, "spans") == HOUR
        made = partitions.partitions(conn, "spans")
        assert partitions.default_rows(conn, "spans") == 0
        kept = conn.execute(text("SELECT count(*) FROM spans_unpartitioned")).scalar()
    # The oldest stored hour to `AHEAD` hours past this one, consecutive.
    assert made[0][1] == partitions.floor(rows[0].start_time, HOUR)
    assert made[-1][1] == partitions.floor(NOW, HOUR) + timedelta(hours=partitions.AHEAD)
    assert all(a[2] == b[1] for a, b in itertools.pairwise(made))
    assert kept == 50
    assert online_partition.drop_old(engine, "spans")
    assert contents(engine) == before


def test_conversion_of_a_fresh_database_and_ingest_after_it(engine: Engine) -> None:
    assert convert(engine).copied == 0
    rows = spans(10, NOW - timedelta(minutes=5), step_s=1)
    assert write(engine, rows) == 10
    # A re-sent batch is stored once: the key holds the span's own start time.
    assert write(engine, rows) == 0
    assert len(contents(engine)) == 10


def test_writes_during_the_copy_are_mirrored(engine: Engine) -> None:
    write(engine, spans(20, NOW - timedelta(hours=2)))
    with engine.begin() as conn:
        online_partition._prepare(conn, "spans", HOUR, echo=lambda _line: None)
    late = spans(5, NOW - timedelta(minutes=30), prefix="b")
    write(engine, late)  # after the trigger, before the copy
    online_partition._copy(engine, "spans", 6, echo=lambda _line: None)
    write(engine, spans(3, NOW, prefix="c"))  # after the copy, before the swap
    with engine.begin() as conn:
        online_partition._swap(conn, "spans")
    assert len(contents(engine)) == 28


def test_a_write_past_the_last_partition_lands_in_the_default_and_moves_out(
    engine: Engine,
) -> None:
    convert(engine)
    far = NOW + timedelta(hours=partitions.AHEAD + 5)
    write(engine, spans(4, far, step_s=1, prefix="f"))
    sessions = sessionmaker(engine)
    # The job reports the stray rows; they are kept.
    assert maintain_partitions(sessions) == 4
    with engine.begin() as conn:
        made = partitions.ensure_ahead(conn, "spans", far, ahead=0)
        assert made == [partitions.partition_name("spans", partitions.floor(far, HOUR))]
        assert partitions.default_rows(conn, "spans") == 0
    assert len(contents(engine)) == 4
    assert maintain_partitions(sessions) == 0


def test_the_job_creates_partitions_ahead(engine: Engine) -> None:
    convert(engine)
    with engine.begin() as conn:
        last = partitions.partitions(conn, "spans")[-1][0]
        conn.execute(text(f"ALTER TABLE spans DETACH PARTITION {last}"))
        conn.execute(text(f"DROP TABLE {last}"))
    maintain_partitions(sessionmaker(engine))
    with engine.connect() as conn:
        assert partitions.partitions(conn, "spans")[-1][0] == last


def test_retention_drops_whole_partitions_and_scrubs_content(engine: Engine) -> None:
    settings = CollectorSettings(retention_spans_days=1, retention_content_days=0.5)
    old = spans(30, NOW - timedelta(days=2), step_s=60)  # 30 minutes, two days ago
    middle = spans(10, NOW - timedelta(hours=18), step_s=60, prefix="m")
    fresh = spans(10, NOW - timedelta(hours=1), step_s=60, prefix="n")
    write(engine, old + middle + fresh)
    convert(engine)
    # A late span older than every partition: kept in the default, deleted row by row.
    write(engine, spans(1, NOW - timedelta(days=3), prefix="l"))

    result = purge(engine, settings, now=NOW)

    cut = NOW - timedelta(days=1)
    assert result.partitions_dropped[0] == partitions.partition_name(
        "spans", old[0].start_time.replace(minute=0, second=0, microsecond=0)
    )
    with engine.connect() as conn:
        assert all(end > cut for _, _, end in partitions.partitions(conn, "spans"))
    assert result.spans_deleted == 1
    assert contents(engine) == {(r.trace_id, r.span_id, r.start_time) for r in middle + fresh}
    with engine.connect() as conn:
        scrubbed = conn.execute(
            text("SELECT count(*) FROM spans WHERE attributes ? 'specgate.prompt'")
        ).scalar()
    assert scrubbed == 10  # only the fresh hour keeps its content


def test_a_time_bounded_query_reads_only_its_partitions(engine: Engine) -> None:
    write(engine, spans(6 * 60, NOW - timedelta(hours=6), step_s=60))
    convert(engine)
    since = partitions.floor(NOW, HOUR) - timedelta(hours=2)
    with engine.connect() as conn:
        conn.execute(text("ANALYZE spans"))
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                text("EXPLAIN SELECT count(*) FROM spans WHERE start_time >= :s"), {"s": since}
            )
        )
        every = [name for name, _, _ in partitions.partitions(conn, "spans")]
    read = [name for name in every if name in plan]
    # The two hours before this one, this one, the ones ahead, and the default.
    assert len(read) == 3 + partitions.AHEAD
    assert "spans_default" in plan
    assert partitions.partition_name("spans", since - timedelta(hours=1)) not in plan


def samples(session: Session, route_id: int, n: int, start: datetime) -> None:
    """Scraped samples as `collectors.scrape_job` stores them (ORM rows)."""
    session.add_all(
        EngineSample(
            route_id=route_id, metric="requests_running", labels={}, value=float(i),
            scraped_at=start + timedelta(minutes=10 * i),
        )
        for i in range(n)
    )  # fmt: skip


def test_engine_samples_keep_their_ids_route_cascade_and_sequence(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        ids = make_rollout(session)
        samples(session, ids.baseline_route, 30, NOW - timedelta(hours=4))
    with engine.connect() as conn:
        before = conn.execute(text("SELECT id, scraped_at, value FROM engine_samples")).all()

    online_partition.convert(engine, "engine_samples", period=HOUR, echo=lambda _line: None)
    assert online_partition.drop_old(engine, "engine_samples")  # its sequence stays

    with Session(engine) as session, session.begin():
        samples(session, ids.candidate_route, 3, NOW)
    with engine.connect() as conn:
        after = conn.execute(text("SELECT id, scraped_at, value FROM engine_samples")).all()
        assert partitions.period_s(conn, "engine_samples") == HOUR
    assert set(before) <= set(after) and len(after) == 33
    assert len({row.id for row in after}) == 33  # new ids continue the old sequence
    with engine.begin() as conn:  # the route's cascade still holds
        conn.execute(text("DELETE FROM rollouts"))
        conn.execute(text("DELETE FROM routes WHERE id = :r"), {"r": ids.baseline_route})
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM engine_samples")).scalar() == 3


def test_the_crossover_s_sample_query_reads_only_recent_partitions(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        ids = make_rollout(session)
        samples(session, ids.baseline_route, 6 * 6, NOW - timedelta(hours=6))
    online_partition.convert(engine, "engine_samples", period=HOUR, echo=lambda _line: None)
    seen: list[tuple[str, object]] = []

    def capture(_conn, _cursor, statement, parameters, _context, _many) -> None:
        if "engine_samples" in statement:
            seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    with Session(engine) as session:
        since = NOW - timedelta(minutes=30)
        assert crossover.running(session, [ids.baseline_route], since=since)
    event.remove(engine, "before_cursor_execute", capture)
    statement, parameters = seen[-1]
    with engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()
        cursor.execute("EXPLAIN " + statement, parameters)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        every = [name for name, _, _ in partitions.partitions(conn, "engine_samples")]
    read = [name for name in every if name in plan]
    # The hour holding `since`, this one (the same past half past), and the ones ahead (and
    # the default), no older.
    hours = {partitions.floor(since, HOUR), partitions.floor(NOW, HOUR)}
    assert len(read) == len(hours) + partitions.AHEAD
    assert partitions.partition_name("engine_samples", partitions.floor(since, HOUR)) in read


def test_the_command_converts_with_progress_then_drops_the_old_table(
    engine: Engine, empty_pg_url: str, tmp_path
) -> None:
    write(engine, spans(30, NOW - timedelta(hours=3)))

    def specgate(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "gate", "db", "partition", *args],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
            env={**os.environ, "SPECGATE_DATABASE_URL": empty_pg_url},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = specgate("spans", "--period", "hour", "--batch", "10")
    assert "spans: copied 30/30 rows" in out and "swapped" in out
    assert len(contents(engine)) == 30
    assert "dropped spans_unpartitioned" in specgate("spans", "--drop-old")
    assert "already partitioned" in specgate("spans")


def test_retention_drops_old_engine_sample_partitions(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        ids = make_rollout(session)
        samples(session, ids.baseline_route, 6, NOW - timedelta(days=2))  # one hour's worth
        samples(session, ids.baseline_route, 6, NOW - timedelta(hours=1))
    online_partition.convert(engine, "engine_samples", period=HOUR, echo=lambda _line: None)
    with Session(engine) as session, session.begin():  # older than every partition
        samples(session, ids.baseline_route, 1, NOW - timedelta(days=3))

    result = purge(engine, CollectorSettings(retention_samples_days=1), now=NOW)

    old = partitions.partition_name(
        "engine_samples", partitions.floor(NOW - timedelta(days=2), HOUR)
    )
    assert old in result.partitions_dropped and result.samples_deleted == 1
    with engine.connect() as conn:
        left = conn.execute(text("SELECT min(scraped_at), count(*) FROM engine_samples")).one()
        assert all(
            end > NOW - timedelta(days=1)
            for _, _, end in partitions.partitions(conn, "engine_samples")
        )
    assert left[1] == 6 and left[0] >= NOW - timedelta(hours=1)


def test_a_partition_is_created_while_a_write_for_its_range_is_in_flight(
    engine: Engine,
) -> None:
    import threading

    convert(engine)
    far = partitions.floor(NOW + timedelta(hours=partitions.AHEAD + 5), HOUR)
    writer = engine.connect()
    tx = writer.begin()
    # A writer's transaction holds a row for the missing partition's range, in the default.
    storage.of(engine).insert_spans(writer, spans(1, far, prefix="w"), NOW)
    failed: list[BaseException] = []

    def create() -> None:
        try:
            with engine.begin() as conn:
                partitions.create_partition(conn, "spans", "start_time", far, HOUR)
        except BaseException as error:  # reported by the assertion below
            failed.append(error)

    job = threading.Thread(target=create)
    job.start()
    with engine.connect() as watch:
        for _ in range(600):  # until the job waits on the writer's lock (a deadline, no clock)
            waiting = watch.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            ).scalar_one()
            if waiting:
                break
            watch.rollback()  # pg_stat_activity is read once per transaction: a fresh look
            threading.Event().wait(0.05)
    tx.commit()
    writer.close()
    job.join(timeout=30)
    assert not failed, failed
    with engine.connect() as conn:
        assert partitions.default_rows(conn, "spans") == 0
        held = conn.execute(
            text(f"SELECT count(*) FROM {partitions.partition_name('spans', far)}")
        ).scalar_one()
    assert held == 1


def test_retention_scrubs_content_while_a_long_read_holds_the_drop_back(engine: Engine) -> None:
    settings = CollectorSettings(retention_spans_days=1, retention_content_days=0.5)
    write(
        engine, spans(5, NOW - timedelta(days=2)) + spans(5, NOW - timedelta(hours=18), prefix="m")
    )
    convert(engine)
    reader = engine.connect()
    reader.begin()
    reader.execute(text("SELECT count(*) FROM spans")).scalar_one()  # a report's long read
    try:
        held = purge(engine, settings, now=NOW)
    finally:
        reader.close()
    assert held.partitions_dropped == ()
    with engine.connect() as conn:
        kept = conn.execute(
            text("SELECT count(*) FROM spans WHERE attributes ? 'specgate.prompt'")
        ).scalar()
    assert kept == 0  # the 7-day rule's scrub ran although no partition could go
    assert purge(engine, settings, now=NOW).partitions_dropped  # the next turn
    with engine.connect() as conn:
        assert all(
            end > NOW - timedelta(days=1) for _, _, end in partitions.partitions(conn, "spans")
        )
