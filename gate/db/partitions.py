"""Time partitions of Postgres telemetry tables: convert, create ahead, drop by age.

A partitioned table is declaratively range-partitioned on its time column, one partition
per period (`<table>_pYYYYMMDDHHMMSS`), plus `<table>_default` for rows no partition
holds, so a write past the last partition is never lost. The period lives in the parent's
comment (`specgate:period=<seconds>`), so the periodic job needs no setting to follow it.
`convert` turns today's unpartitioned table into that layout online. Postgres only: callers
ask `gate.db.storage.of(bind).partitions` first. The layout is in docs/architecture.md.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Layout:
    """How one table is partitioned: its time column and the key that includes it."""

    table: str
    column: str
    key: tuple[str, ...]
    # Rows are updated and deleted, not only inserted: the conversion mirrors every change.
    mutable: bool = False
    # (table, column) of rows elsewhere naming this table's `id`, once by a foreign key
    # (a partitioned table's `id` alone is no key): deleted as its partitions are dropped.
    referrers: tuple[tuple[str, str], ...] = ()
    # (table, column) of the other foreign keys into it, which also go at the swap: rows
    # that age out by their own retention, with this table's. A key in neither refuses
    # the conversion (`gate.db.online_partition`).
    ages_with: tuple[tuple[str, str], ...] = ()

    def accounts_for(self, referrer: str, column: str) -> bool:
        """Return whether a foreign key `referrer.column` into this table is provided for."""
        return (referrer, column) in (*self.referrers, *self.ages_with)


# Tables `specgate db partition` converts. spans: by `start_time`, the span's own time, so
# a re-sent span lands in the same partition and `(trace_id, span_id, start_time)` keeps
# ingest idempotent. engine_samples: by `scraped_at`; nothing refers to its id. pairs: by
# `created_at`, the pair's start, which its stub carries too (`collectors.normalise`);
# `generations.pair_id` loses its foreign key. generations: by `started_at`, its call
# span's start, so a re-sent span lands in the same partition and the unique (trace_id,
# span_id, started_at) keeps ingest idempotent; `evaluations.generation_id` and
# `feedback.generation_id` lose their foreign keys (retention deletes those rows instead).
# requests: by `created_at`, the pair span's start, as its pair's; `pairs.request_id`
# loses its foreign key (the two age out together). evaluations: by
# `generation_started_at`, a copy of its generation's `started_at` that every writer sets,
# so an evaluation lies in its generation's period and the two drop on the same cut (a
# partitioned referrer is never deleted from row by row, below); nothing refers to it.
# See docs/architecture.md.
LAYOUTS = {
    "spans": Layout("spans", "start_time", ("trace_id", "span_id", "start_time")),
    "engine_samples": Layout("engine_samples", "scraped_at", ("id", "scraped_at")),
    "pairs": Layout(
        "pairs",
        "created_at",
        ("id", "created_at"),
        mutable=True,
        ages_with=(("generations", "pair_id"),),
    ),
    "generations": Layout(
        "generations",
        "started_at",
        ("id", "started_at"),
        mutable=True,
        referrers=(("evaluations", "generation_id"), ("feedback", "generation_id")),
    ),
    "requests": Layout(
        "requests",
        "created_at",
        ("id", "created_at"),
        mutable=True,
        ages_with=(("pairs", "request_id"),),
    ),
    # Mutable: retention deletes the evaluations of a dropped generation while it is copied.
    "evaluations": Layout(
        "evaluations", "generation_started_at", ("id", "generation_started_at"), mutable=True
    ),
}
# What `specgate db partition` converts when no table is named: `pairs`, `generations`,
# `requests` and `evaluations` only when asked, once every gateway, collector and worker runs
# a version that writes them partitioned (deploy/PRODUCTION.md).
DEFAULT_TABLES = ("spans", "engine_samples")
PERIODS = {"hour": 3600, "day": 86_400, "week": 604_800}
# Partitions kept ready past the current one.
AHEAD = 3
_COMMENT = re.compile(r"specgate:period=(\d+)")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Echo = Callable[[str], None]


def period_s(conn: Connection, table: str) -> int | None:
    """Return the partition period of a partitioned table, or None when it is not one."""
    row = conn.execute(
        text(
            "SELECT obj_description(c.oid, 'pg_class') FROM pg_class c "
            "WHERE c.oid = to_regclass(:t) AND c.relkind = 'p'"
        ),
        {"t": table},
    ).first()
    if row is None:
        return None
    found = _COMMENT.search(row[0] or "")
    return int(found.group(1)) if found else None


def floor(moment: datetime, period: int) -> datetime:
    """Return the start of the period holding `moment` (periods count from the epoch)."""
    seconds = int((moment - _EPOCH).total_seconds()) // period * period
    return _EPOCH + timedelta(seconds=seconds)


def partition_name(table: str, start: datetime) -> str:
    """Return the name of the partition of `table` starting at `start`."""
    return f"{table}_p{start:%Y%m%d%H%M%S}"


def partitions(conn: Connection, table: str) -> list[tuple[str, datetime, datetime]]:
    """Return (name, from, to) of a table's range partitions, oldest first."""
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:t)"
        ),
        {"t": table},
    ).all()
    found = []
    for name, bound in rows:
        moments = re.findall(r"'([^']+)'", bound)
        if len(moments) == 2:
            start, end = (datetime.fromisoformat(m).astimezone(UTC) for m in moments)
            found.append((name, start, end))
    return sorted(found, key=lambda p: p[1])


def create_partition(
    conn: Connection, table: str, column: str, start: datetime, period: int
) -> str:
    """Create the partition of `table` (by `column`) starting at `start`, moving in the rows
    its default partition holds for it."""
    name = partition_name(table, start)
    end = start + timedelta(seconds=period)
    bounds = {"a": start, "b": end}
    # Its CHECK constraints too (a stored enum's): ATTACH requires the parent's.
    conn.execute(
        text(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    )
    # The default must not hold rows of the new range when it is attached: move them. Lock
    # it first (ATTACH takes this lock anyway), or a write in flight for the range lands in
    # it after the move and the attach fails, every turn while ingest goes on. Writers wait
    # on the parent first (reads go on): one waiting on the default alone has already
    # planned without the new partition, and after the move its update of a moved row
    # (a pair's) changes nothing and its insert breaks the default's new constraint.
    conn.execute(text(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE"))
    conn.execute(text(f"LOCK TABLE {table}_default IN ACCESS EXCLUSIVE MODE"))
    conn.execute(
        text(
            f"WITH moved AS (DELETE FROM {table}_default WHERE {column} >= :a AND "
            f"{column} < :b RETURNING *) INSERT INTO {name} SELECT * FROM moved"
        ),
        bounds,
    )
    conn.execute(
        text(
            f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM "
            f"('{start.isoformat()}') TO ('{end.isoformat()}')"
        )
    )
    return name


def ensure_ahead(conn: Connection, table: str, now: datetime, ahead: int = AHEAD) -> list[str]:
    """Create the missing partitions from the current period to `ahead` past it."""
    period = period_s(conn, table)
    if period is None:
        return []
    have = {start for _, start, _ in partitions(conn, table)}
    first = floor(now, period)
    wanted = (first + timedelta(seconds=period * i) for i in range(ahead + 1))
    column = _layout(table).column
    return [create_partition(conn, table, column, s, period) for s in wanted if s not in have]


def drop_before(engine: Engine, table: str, cut: datetime) -> list[str]:
    """Detach every partition wholly older than `cut`, then drop the detached ones; return
    the names dropped."""
    with engine.connect() as conn:
        old = [name for name, _, end in partitions(conn, table) if end <= cut]
    for name in old:
        if not _detach(engine, table, name):
            break
    return _drop_detached(engine, table)


# The detach is the one step that locks the parent (ACCESS EXCLUSIVE: a default partition
# rules out DETACH ... CONCURRENTLY). While it waits for a long read, every writer queues
# behind it, so it waits briefly, a few times, then leaves the partition to the next turn.
DETACH_WAIT = "200ms"
DETACH_TRIES = 3
DETACHED = "specgate:detached"


def _detach(engine: Engine, table: str, name: str) -> bool:
    """Detach one partition, marking it for the drop in the same transaction."""
    for _ in range(DETACH_TRIES):
        try:
            with engine.begin() as conn:
                conn.execute(text(f"SET LOCAL lock_timeout = '{DETACH_WAIT}'"))
                conn.execute(text(f"ALTER TABLE {table} DETACH PARTITION {name}"))
                conn.execute(text(f"COMMENT ON TABLE {name} IS '{DETACHED}'"))
            return True
        except OperationalError as error:
            if getattr(error.orig, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
                raise
            time.sleep(0.2)
    log.warning("partition_detach_waited table=%s partition=%s", table, name)
    return False


def _drop_detached(engine: Engine, table: str) -> list[str]:
    """Drop the partitions detached from `table`, this turn's and any an earlier turn left.

    The drop locks only the detached table; its time is the filesystem freeing the files
    (bench/partitions.py, BENCHMARKS.md). The mark makes it safe to stop between the two.
    Rows elsewhere that named the dropped rows (`Layout.referrers`) go first, in batches.
    """
    with engine.connect() as conn:
        names = conn.execute(
            text(
                "SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' "
                "AND NOT c.relispartition AND pg_table_is_visible(c.oid) "
                "AND starts_with(c.relname, :prefix) "
                "AND obj_description(c.oid, 'pg_class') = :mark ORDER BY c.relname"
            ),
            {"prefix": f"{table}_p", "mark": DETACHED},
        ).scalars()
        found = list(names)
        referrers = row_referrers(conn, table)
    for name in found:
        # What a foreign key's cascade deleted: first in batches of their own transactions,
        # REFERRED_BATCH of the dropped rows at a time (a day of generations names hundreds
        # of millions of evaluations: one transaction would hold back vacuum's horizon and
        # write its WAL at once); the detached table stays, marked, until the drop, so a stop
        # in between resumes. The drop's transaction deletes what landed since.
        if referrers:
            _delete_referrers(engine, name, referrers)
        with engine.begin() as conn:
            for other, column in referrers:
                conn.execute(text(f"DELETE FROM {other} WHERE {column} IN (SELECT id FROM {name})"))
            conn.execute(text(f"DROP TABLE {name}"))
    return found


def row_referrers(conn: Connection, table: str) -> tuple[tuple[str, str], ...]:
    """Return the (table, column) of `Layout.referrers` whose rows go with a row of `table`,
    deleted by its id.

    A referrer partitioned too (evaluations, by its generation's start) is left out: it
    drops its own partitions on the same cut, and a delete by id would read every one.
    """
    return tuple(r for r in _layout(table).referrers if period_s(conn, r[0]) is None)


# Rows of a detached partition whose referrers (`Layout.referrers`) go in one transaction.
REFERRED_BATCH = 10_000


def _delete_referrers(engine: Engine, name: str, referrers: tuple[tuple[str, str], ...]) -> None:
    """Delete the rows of `referrers` naming a row of the detached `name`, a batch of its
    rows (in `id` order) per transaction."""
    after = 0  # ids come from a sequence, from 1
    while True:
        with engine.begin() as conn:
            bound = {"after": after, "n": REFERRED_BATCH}
            upto = conn.execute(
                text(
                    f"SELECT max(id) FROM (SELECT id FROM {name} WHERE id > :after "
                    "ORDER BY id LIMIT :n) AS batch"
                ),
                bound,
            ).scalar()
            if upto is None:
                return
            ids = f"SELECT id FROM {name} WHERE id > :after AND id <= :upto"
            for other, column in referrers:
                conn.execute(
                    text(f"DELETE FROM {other} WHERE {column} IN ({ids})"), {**bound, "upto": upto}
                )
        after = upto


_LOCK_NOT_AVAILABLE = "55P03"


def default_rows(conn: Connection, table: str, cap: int = 1_000_000) -> int:
    """Return how many rows (up to `cap`) sit in a table's default partition (0: none)."""
    if period_s(conn, table) is None:
        return 0
    query = f"SELECT count(*) FROM (SELECT 1 FROM {table}_default LIMIT {int(cap)}) AS held"
    return int(conn.execute(text(query)).scalar_one())


def _layout(table: str) -> Layout:
    if table not in LAYOUTS:
        raise ValueError(f"{table} is not a partitionable table ({', '.join(LAYOUTS)})")
    return LAYOUTS[table]
