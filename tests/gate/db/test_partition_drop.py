"""Retention's drop of a time partition on real Postgres: detach, then drop, safe to stop
between the two."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from collectors.retention import purge
from gate.db import partitions
from gate.settings import CollectorSettings
from tests.gate.db.test_partitions import NOW, contents, convert, engine, spans, write

__all__ = ["engine"]  # the fixture, shared with test_partitions


class Stopped(Exception):
    """Stands for retention's process dying mid-turn."""


@pytest.fixture
def stop_at_drop(engine: Engine) -> Iterator[None]:
    """Make the first DROP TABLE of a partition fail, as if the process died just before."""

    def stop(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.startswith("DROP TABLE spans_p"):
            event.remove(engine, "before_cursor_execute", stop)
            raise Stopped(statement)

    event.listen(engine, "before_cursor_execute", stop)
    yield


def exists(engine: Engine, name: str) -> bool:
    with engine.connect() as conn:
        return conn.execute(text("SELECT to_regclass(:t)"), {"t": name}).scalar() is not None


def test_a_partition_detached_by_a_turn_that_stopped_is_dropped_by_the_next(
    engine: Engine, stop_at_drop: None
) -> None:
    settings = CollectorSettings(retention_spans_days=1, retention_content_days=0.5)
    old = spans(5, NOW - timedelta(days=2))
    fresh = spans(5, NOW - timedelta(hours=1), prefix="n")
    write(engine, old + fresh)
    convert(engine)
    name = partitions.partition_name(
        "spans", old[0].start_time.replace(minute=0, second=0, microsecond=0)
    )
    with pytest.raises(Stopped):
        purge(engine, settings, now=NOW)
    assert exists(engine, name)  # detached: out of `spans`, its files still on disk
    assert contents(engine) == {(r.trace_id, r.span_id, r.start_time) for r in fresh}

    assert name in purge(engine, settings, now=NOW).partitions_dropped
    assert not exists(engine, name)


def test_a_table_that_only_looks_like_a_partition_is_never_dropped(engine: Engine) -> None:
    convert(engine)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE spans_p_mine (id int)"))
    assert partitions.drop_before(engine, "spans", NOW - timedelta(days=30)) == []
    assert exists(engine, "spans_p_mine")
