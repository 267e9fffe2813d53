"""Spool replay: only the rows' own faults fail a span; the rest waits; replay is batched."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from collectors import spool as spool_io
from collectors.spool import Segment, Spool
from collectors.store import is_transient
from tests.collectors.factory import gateway_spans
from tests.collectors.test_writer import UNREACHABLE, counts, start, value
from tests.waits import wait_until

pytestmark = pytest.mark.postgres


@contextmanager
def read_only(pg_url: str, pg_engine: Engine) -> Iterator[None]:
    """Make the test database answer read-only, as a demoted primary does after a failover."""
    name = make_url(pg_url).database
    admin = create_engine(make_url(pg_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
    try:
        yield
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{name}" RESET default_transaction_read_only'))
        admin.dispose()
        pg_engine.dispose()


def spooled(home: Path) -> list[Path]:
    return sorted((home / "spool").glob("*.spool"))


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (psycopg.errors.ReadOnlySqlTransaction, True),  # 25006, a failover
        (psycopg.errors.InsufficientPrivilege, True),  # 42501, a grant not yet restored
        (psycopg.errors.AdminShutdown, True),
        (psycopg.errors.StringDataRightTruncation, False),  # 22001, the span's value
        (psycopg.errors.ForeignKeyViolation, False),  # 23503
    ],
)
def test_write_errors_are_classified_by_sqlstate(error, transient):
    assert is_transient(error()) is transient


def test_replay_into_a_read_only_database_keeps_the_spool(pg_url, pg_engine, pg_ids, tmp_path):
    down = start(UNREACHABLE, tmp_path, CollectorRegistry())
    spans = [row for _ in range(5) for row in gateway_spans(pg_ids)]
    receipt = down.writer.submit(spans, on_settled=lambda _: None)
    assert down.writer.flush(10)
    down.close()
    assert receipt.settled and not receipt.refused and not receipt.failed  # a 200 was sent
    assert spooled(tmp_path)

    registry = CollectorRegistry()
    with read_only(pg_url, pg_engine):
        up = start(pg_url, tmp_path, registry)
        try:
            # The replay met the read-only database: it is "down", the spool is kept.
            assert wait_until(lambda: not up.writer.database_up), "replay never met the database"
            assert spooled(tmp_path) and value(registry, "spans_failed") == 0
        except BaseException:
            up.close()
            raise
    try:  # writable again: the kept spans land
        assert wait_until(lambda: not spooled(tmp_path))
    finally:
        up.close()
    assert counts(pg_engine)[0] == len(spans) and value(registry, "spans_failed") == 0


def test_live_spans_are_spooled_not_failed_while_the_database_is_read_only(
    pg_url, pg_engine, pg_ids, tmp_path
):
    registry = CollectorRegistry()
    spans = [row for _ in range(5) for row in gateway_spans(pg_ids)]
    with read_only(pg_url, pg_engine):
        pipeline = start(pg_url, tmp_path, registry)
        try:
            receipt = pipeline.writer.submit(spans, on_settled=lambda _: None)
            assert pipeline.writer.flush(10)
        finally:
            pipeline.close()
    # Durable in the spool (a 200), not a partial success that tells the sender to drop them.
    assert receipt.settled and receipt.failed == 0 and receipt.refused == 0
    assert value(registry, "spans_failed") == 0 and spooled(tmp_path)


def test_a_span_refused_alone_on_replay_is_quarantined_not_deleted(
    pg_url, pg_engine, pg_ids, tmp_path, caplog
):
    spans = [row for _ in range(5) for row in gateway_spans(pg_ids)]
    spans[6].name = "x" * 300  # longer than the column, even stored raw
    held = Spool.claim(tmp_path / "spool", max_bytes=1 << 20)
    assert held.append(spans)
    held.release()

    registry = CollectorRegistry()
    with caplog.at_level(logging.ERROR, logger="collectors"):
        pipeline = start(pg_url, tmp_path, registry)
        try:
            assert wait_until(lambda: not spooled(tmp_path))
        finally:
            pipeline.close()
    (bad,) = (tmp_path / "spool").glob("*.bad")
    assert spool_io.read(Segment(bad, bad.stat().st_size)) == [spans[6]]
    assert value(registry, "spans_quarantined") == 1 and value(registry, "spans_replayed") == 19
    assert counts(pg_engine)[0] == 19
    assert f"collector.spans_quarantined spans=1 file={bad}" in caplog.text


def test_an_idle_collector_replays_many_small_segments_in_few_transactions(
    pg_url, pg_engine, pg_ids, tmp_path
):
    held = Spool.claim(tmp_path / "spool", max_bytes=1 << 30)
    for _ in range(200):  # one exporter's small requests during an outage, each spooled
        assert held.append(gateway_spans(pg_ids))
    held.release()
    registry = CollectorRegistry()
    pipeline = start(pg_url, tmp_path, registry)
    try:
        assert wait_until(lambda: not spooled(tmp_path), timeout=60)
    finally:
        pipeline.close()
    assert counts(pg_engine)[0] == 800 and value(registry, "spans_replayed") == 800
    # 800 spans fit one batch: one transaction, not one per segment.
    assert value(registry, "batches") == 1


def test_new_spool_folders_are_made_durable(tmp_path, monkeypatch):
    synced: list[Path] = []
    real = spool_io._fsync_folder
    monkeypatch.setattr(
        spool_io, "_fsync_folder", lambda folder: synced.append(folder) or real(folder)
    )
    base = tmp_path / "state" / "spool"
    first = Spool.claim(base, max_bytes=1 << 20)
    second = Spool.claim(base, max_bytes=1 << 20)  # base/writer-1
    try:
        # Each created folder's entry lives in its parent: the parent is fsynced.
        assert {tmp_path, tmp_path / "state", base} <= set(synced)
    finally:
        first.release()
        second.release()


def test_set_aside_files_are_never_overwritten_after_a_restart(pg_ids, tmp_path):
    first, second = gateway_spans(pg_ids), gateway_spans(pg_ids)
    for spans in (first, second):  # each time in a fresh process with an empty spool
        spool = Spool.claim(tmp_path, max_bytes=1 << 20)
        spool.quarantine_rows(spans)
        spool.release()
    kept = [spool_io.read(Segment(path, 0)) for path in sorted(tmp_path.glob("*.bad"))]
    assert kept == [first, second]
