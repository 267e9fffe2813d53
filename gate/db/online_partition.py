"""Convert an unpartitioned telemetry table into time partitions while writers keep writing.

Steps, each its own transaction: build `<table>_partitioned` (same columns, a key that
includes the time column, a default partition) and mirror new writes into it with a
trigger; create the partitions covering the stored rows and `AHEAD` periods, one a
transaction; copy the stored rows in key-ordered batches; then swap the names under a
short lock. The old table stays as
`<table>_unpartitioned` until `drop_old`. Rerunning after an interruption resumes: the
copy is idempotent (ON CONFLICT DO NOTHING).

Scrubs and deletes that retention runs during the copy may miss the new table; both are
idempotent and run again at retention's next turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, Engine, text

from gate.db.partitions import AHEAD, Echo, create_partition, floor, partitions, period_s
from gate.db.partitions import _layout as layout
from gate.errors import ConfigError

NEW = "{}_partitioned"
OLD = "{}_unpartitioned"


@dataclass(frozen=True)
class Conversion:
    """What one conversion did."""

    table: str
    copied: int
    partitions: int
    swapped: bool


def convert(
    engine: Engine, table: str, *, period: int, batch: int = 20_000, echo: Echo = print
) -> Conversion:
    """Partition `table` by its time column, `period` seconds a partition; return the tally."""
    with engine.connect() as conn:
        if period_s(conn, table) is not None:
            echo(f"{table} is already partitioned")
            return Conversion(table, 0, 0, swapped=False)
    with engine.connect() as conn:
        _check_foreign_keys(conn, table)
    with engine.begin() as conn:
        _prepare(conn, table, period, echo)
    made = _cover(engine, table, period, echo)
    copied = _copy(engine, table, batch, echo)
    with engine.begin() as conn:
        _swap(conn, table)
    echo(f"{table}: swapped; the old rows stay in {OLD.format(table)} until --drop-old")
    return Conversion(table, copied, made, swapped=True)


def drop_old(engine: Engine, table: str) -> bool:
    """Drop the unpartitioned table a conversion kept; return whether there was one."""
    with engine.begin() as conn:
        found = conn.execute(text("SELECT to_regclass(:t)"), {"t": OLD.format(table)}).scalar()
        if found is not None:
            conn.execute(text(f"DROP TABLE {OLD.format(table)}"))
    return found is not None


def _prepare(conn: Connection, table: str, period: int, echo: Echo) -> None:
    """Build the partitioned table with its default partition, and mirror new writes."""
    new, spec = NEW.format(table), layout(table)
    if conn.execute(text("SELECT to_regclass(:t)"), {"t": new}).scalar() is not None:
        echo(f"{new} exists: resuming the copy")
        return
    conn.execute(
        text(
            f"CREATE TABLE {new} (LIKE {table} INCLUDING ALL EXCLUDING INDEXES) "
            f"PARTITION BY RANGE ({spec.column})"
        )
    )
    conn.execute(text(f"COMMENT ON TABLE {new} IS 'specgate:period={period}'"))
    conn.execute(
        text(f"ALTER TABLE {new} ADD CONSTRAINT pk_{new} PRIMARY KEY ({', '.join(spec.key)})")
    )
    for name, definition in _secondary_indexes(conn, table):
        conn.execute(text(_with_column(_retarget(definition, name, table, new), spec.column)))
    for name, definition in _foreign_keys(conn, table):  # LIKE copies none
        conn.execute(text(f"ALTER TABLE {new} ADD CONSTRAINT {name} {definition}"))
    conn.execute(text(f"CREATE TABLE {new}_default PARTITION OF {new} DEFAULT"))
    if spec.mutable:
        conn.execute(text(_mirror_changes(conn, table, new, spec.key)))
    else:
        conn.execute(text(_MIRROR.format(table=table, new=new)))
    echo(f"{new}: a default partition; new writes mirrored")


def _cover(engine: Engine, table: str, period: int, echo: Echo) -> int:
    """Create the missing partitions from the oldest stored row to `AHEAD` periods past
    now, each in its own transaction: a partition holds some 30 locks until its creator
    commits, and an install's whole history (pairs are never deleted unpartitioned) in one
    transaction can run the server out of its shared lock table (`max_locks_per_transaction`
    sizes it): "out of shared memory"."""
    new, column = NEW.format(table), layout(table).column
    with engine.connect() as conn:
        oldest = conn.execute(text(f"SELECT min({column}) FROM {table}")).scalar()
        have = {start for _, start, _ in partitions(conn, new)}
    now = datetime.now(UTC)
    start = floor(min(oldest or now, now), period)
    last = floor(now, period) + timedelta(seconds=period * AHEAD)
    made = 0
    while start <= last:
        if start not in have:
            with engine.begin() as conn:
                create_partition(conn, new, column, start, period)
            made += 1
        start += timedelta(seconds=period)
    echo(f"{new}: {made} partitions of {period} s made")
    return made


def _copy(engine: Engine, table: str, batch: int, echo: Echo) -> int:
    key = ", ".join(_primary_key(engine, table))
    # Rows that change: lock the batch's, so an update waits for the copy and its mirror
    # then rewrites the copied row; else an older copy could land after the update's mirror.
    lock = "FOR SHARE" if layout(table).mutable else ""
    with engine.connect() as conn:
        total = conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
    after: tuple[object, ...] | None = None
    copied = 0
    while True:
        where = (
            f"WHERE ({key}) > ({', '.join(f':k{i}' for i in range(len(after)))})" if after else ""
        )
        params = {f"k{i}": v for i, v in enumerate(after or ())}
        with engine.begin() as conn:
            rows = conn.execute(
                text(
                    f"WITH batch AS (SELECT * FROM {table} {where} ORDER BY {key} LIMIT {batch} "
                    f"{lock}), "
                    f"copied AS (INSERT INTO {NEW.format(table)} SELECT * FROM batch "
                    f"ON CONFLICT DO NOTHING) SELECT {key} FROM batch ORDER BY {key}"
                ),
                params,
            ).all()
        if not rows:
            return copied
        copied += len(rows)
        after = tuple(rows[-1])
        echo(f"{table}: copied {copied}/{total} rows")


def _swap(conn: Connection, table: str) -> None:
    new, old = NEW.format(table), OLD.format(table)
    conn.execute(text("SET LOCAL lock_timeout = '10s'"))
    conn.execute(text(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
    conn.execute(text(f"DROP TRIGGER specgate_mirror ON {table}"))
    # A key referenced from elsewhere must hold the partition column: `id` alone no longer
    # is one, so those foreign keys go (left in place they would follow the old table).
    for referrer, name in _inbound_foreign_keys(conn, table):
        conn.execute(text(f"ALTER TABLE {referrer} DROP CONSTRAINT {name}"))
    conn.execute(text(f"DROP FUNCTION {table}_mirror()"))
    # A serial column's sequence follows the new table, or dropping the old one takes it.
    for sequence, column in _owned_sequences(conn, table):
        conn.execute(text(f"ALTER SEQUENCE {sequence} OWNED BY {new}.{column}"))
    # Index names are schema-wide: the old table's go aside, the new table's take them.
    for name, _ in _all_indexes(conn, table):
        conn.execute(text(f"ALTER INDEX {name} RENAME TO {_aside(name)}"))
    conn.execute(text(f"ALTER TABLE {table} RENAME TO {old}"))
    for name, _ in _all_indexes(conn, new):
        conn.execute(text(f"ALTER INDEX {name} RENAME TO {name.replace(new, table)}"))
    conn.execute(text(f"ALTER TABLE {new}_default RENAME TO {table}_default"))
    for name in _children(conn, new):
        if name != f"{table}_default":
            conn.execute(text(f"ALTER TABLE {name} RENAME TO {name.replace(new, table)}"))
    conn.execute(text(f"ALTER TABLE {new} RENAME TO {table}"))


def _aside(name: str) -> str:
    return f"{name[:48]}_unpartitioned"  # within the 63 characters of a name


_MIRROR = """
CREATE FUNCTION {table}_mirror() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {new} VALUES (NEW.*) ON CONFLICT DO NOTHING;
  RETURN NULL;
END $$;
CREATE TRIGGER specgate_mirror AFTER INSERT ON {table}
  FOR EACH ROW EXECUTE FUNCTION {table}_mirror();
"""


def _mirror_changes(conn: Connection, table: str, new: str, key: tuple[str, ...]) -> str:
    """Return the trigger mirroring every insert, update and delete into the new table."""
    columns = [c for c in _columns(conn, table) if c not in key]
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns)
    match = " AND ".join(f"{c} = OLD.{c}" for c in key)
    moved = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in key)
    return _MIRROR_CHANGES.format(
        table=table, new=new, key=", ".join(key), sets=sets, match=match, moved=moved
    )


_MIRROR_CHANGES = """
CREATE FUNCTION {table}_mirror() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND ({moved})) THEN
    DELETE FROM {new} WHERE {match};
  END IF;
  IF TG_OP <> 'DELETE' THEN
    INSERT INTO {new} VALUES (NEW.*) ON CONFLICT ({key}) DO UPDATE SET {sets};
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER specgate_mirror AFTER INSERT OR UPDATE OR DELETE ON {table}
  FOR EACH ROW EXECUTE FUNCTION {table}_mirror();
"""


def _with_column(definition: str, column: str) -> str:
    # A partitioned table's unique index must hold its partition column.
    if not definition.startswith("CREATE UNIQUE INDEX") or " WHERE " in definition:
        return definition
    head, columns = definition[:-1].rsplit("(", 1)
    names = [c.strip() for c in columns.split(",")]
    return definition if column in names else f"{head}({columns}, {column})"


def _columns(conn: Connection, table: str) -> list[str]:
    rows = conn.execute(
        text(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(:t) "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        ),
        {"t": table},
    ).all()
    return [r[0] for r in rows]


def _check_foreign_keys(conn: Connection, table: str) -> None:
    """Refuse a table with a foreign key into it that its layout does not provide for: the
    swap drops every such key, and its rows would then outlive the rows they name."""
    rows = conn.execute(
        text(
            "SELECT c.conrelid::regclass::text, a.attname FROM pg_constraint c "
            "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY(c.conkey) "
            "WHERE c.confrelid = to_regclass(:t) AND c.contype = 'f' "
            "AND c.conrelid <> c.confrelid AND c.conparentid = 0"
        ),
        {"t": table},
    ).all()
    spec = layout(table)
    # Another table's conversion in progress or kept (`<t>_partitioned`, `<t>_unpartitioned`)
    # holds that table's keys.
    unknown = sorted(f"{r}.{c}" for r, c in rows if not spec.accounts_for(_converted_from(r), c))
    if unknown:
        raise ConfigError(
            f"{table} cannot be partitioned: the foreign key of {', '.join(unknown)} into it "
            "would be dropped with nothing deleting or ageing out its rows; add it to the "
            f"layout of {table} in gate/db/partitions.py (referrers or ages_with)"
        )


def _converted_from(name: str) -> str:
    """Return the table a conversion's new or kept table stands for, else `name`."""
    for pattern in (NEW, OLD):
        suffix = pattern.format("")
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def _inbound_foreign_keys(conn: Connection, table: str) -> list[tuple[str, str]]:
    rows = conn.execute(
        text(
            "SELECT conrelid::regclass::text, conname FROM pg_constraint "
            "WHERE confrelid = to_regclass(:t) AND contype = 'f' AND conrelid <> confrelid "
            # A partitioned referrer's (pairs' to requests) is cloned on each partition,
            # and dropped with its parent's.
            "AND conparentid = 0"
        ),
        {"t": table},
    ).all()
    return [(referrer, name) for referrer, name in rows]


def _primary_key(engine: Engine, table: str) -> list[str]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(:t) "
                "AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)"
            ),
            {"t": table},
        ).all()
    return [r[0] for r in rows]


def _all_indexes(conn: Connection, table: str) -> list[tuple[str, str]]:
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisprimary FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = to_regclass(:t)"
        ),
        {"t": table},
    ).all()
    return [(name, definition) for name, definition, _ in rows]


def _secondary_indexes(conn: Connection, table: str) -> list[tuple[str, str]]:
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = to_regclass(:t) AND NOT i.indisprimary"
        ),
        {"t": table},
    ).all()
    return [(name, definition) for name, definition in rows]


def _retarget(definition: str, name: str, table: str, new: str) -> str:
    # "CREATE INDEX ix_spans_start_time ON public.spans USING btree (start_time)"
    renamed = definition.replace(f"INDEX {name} ON", f"INDEX {name.replace(table, new, 1)} ON")
    return renamed.replace(f" ON public.{table} ", f" ON public.{new} ").replace(
        f" ON ONLY public.{table} ", f" ON public.{new} "
    )


def _foreign_keys(conn: Connection, table: str) -> list[tuple[str, str]]:
    rows = conn.execute(
        text(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = to_regclass(:t) AND contype = 'f'"
        ),
        {"t": table},
    ).all()
    return [(name, definition) for name, definition in rows]


def _owned_sequences(conn: Connection, table: str) -> list[tuple[str, str]]:
    rows = conn.execute(
        text(
            "SELECT s.relname, a.attname FROM pg_depend d "
            "JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S' "
            "JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid "
            "WHERE d.refobjid = to_regclass(:t) AND d.deptype = 'a'"
        ),
        {"t": table},
    ).all()
    return [(sequence, column) for sequence, column in rows]


def _children(conn: Connection, table: str) -> list[str]:
    rows = conn.execute(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(:t)"
        ),
        {"t": table},
    ).all()
    return [r[0] for r in rows]
