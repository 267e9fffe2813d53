"""The Postgres storage: rows passed as typed arrays or COPY, JSONB, quantiles in SQL."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Engine,
    Float,
    Table,
    Text,
    bindparam,
    cast,
    create_engine,
    extract,
    func,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from gate.db import partitions
from gate.db.rows import (
    ENGINE_FIELDS,
    ENGINE_SKEW,
    FACT_COLUMNS,
    GENERATIONS,
    PAIR_COLUMNS,
    PAIR_SPAN_FIELDS,
    PAIRS,
    REQUEST_COLUMNS,
    REQUESTS,
    EngineFacts,
    GenerationRow,
    NewGeneration,
    PairRow,
    RequestRow,
    SpanRow,
)
from gate.db.storage import pg_copy
from gate.telemetry import attributes as a

_REQUEST_TYPES = pg_copy.binary_types(REQUESTS, REQUEST_COLUMNS)
_PAIR_TYPES = pg_copy.binary_types(PAIRS, PAIR_COLUMNS)
# A vLLM span's facts are keyed by its parent: the generation's own span.
_FACT_TYPES = dict(
    zip(
        FACT_COLUMNS,
        pg_copy.binary_types(GENERATIONS, ("trace_id", "span_id", *ENGINE_FIELDS)).values(),
        strict=True,
    )
)


class PostgresStorage:
    """Postgres: concurrent writers, JSONB, binary COPY and unnest for landing."""

    single_writer = False
    folds_in_sql = True
    partitions = True

    def create_engine(self, url: str, *, echo: bool) -> Engine:
        psycopg = make_url(url).get_driver_name() == "psycopg"
        args = {"connect_timeout": 5} if psycopg else {}
        return create_engine(url, echo=echo, pool_pre_ping=True, connect_args=args)

    @contextmanager
    def snapshot(self, session: Session) -> Iterator[Session]:
        bind = session.get_bind()
        if isinstance(bind, Connection) or _wrote(session):
            # The caller's transaction, and its isolation: rows it wrote are seen only there
            # (at READ COMMITTED each query takes its own snapshot).
            yield session
            return
        # A connection of its own at REPEATABLE READ: one snapshot, taken at the first
        # statement, for the whole read (`specgate pairs export`, the demo's summary: a
        # session bound to the engine that has written nothing in its transaction).
        options = {"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}
        with bind.connect().execution_options(**options) as conn, Session(conn) as reading:
            yield reading

    def insert(self, table: Table | type[Any]) -> postgresql.Insert:
        return postgresql.insert(table)

    def insert_spans(self, conn: Connection, rows: Sequence[SpanRow], received_at: datetime) -> int:
        return pg_copy.insert_spans(conn, rows, received_at)

    def insert_requests(self, conn: Connection, rows: Sequence[RequestRow]) -> None:
        # No conflict target: on partitioned `requests` the key also holds `created_at`.
        _insert(conn, "requests", _REQUEST_TYPES, rows, "ON CONFLICT DO NOTHING")

    def upsert_pairs(self, conn: Connection, rows: Sequence[PairRow]) -> None:
        if not rows:
            return
        fields = ", ".join(f"{name} = EXCLUDED.{name}" for name in PAIR_SPAN_FIELDS)
        tail = f"ON CONFLICT ({_pair_key(conn)}) DO UPDATE SET {fields}"
        _insert(conn, "pairs", _PAIR_TYPES, rows, tail)

    def insert_pair_stubs(self, conn: Connection, rows: Sequence[PairRow]) -> None:
        if not rows:
            return
        # A control call landing after its pair's stub marks the pair as a control pair.
        tail = (
            f"ON CONFLICT ({_pair_key(conn)}) DO UPDATE SET is_control = true "
            "WHERE EXCLUDED.is_control AND NOT pairs.is_control"
        )
        _insert(conn, "pairs", _PAIR_TYPES, rows, tail)

    def vllm_spans(
        self, conn: Connection, trace_ids: Sequence[str]
    ) -> list[tuple[str, str, dict[str, Any], datetime]]:
        # One primary-key probe per trace: the LATERAL with OFFSET 0 keeps the planner from
        # turning this into a scan of the whole spans table.
        query = (
            "SELECT s.trace_id, s.parent_span_id, s.attributes, s.start_time "
            "FROM unnest(%b::text[]) AS v(trace_id) "
            "CROSS JOIN LATERAL (SELECT trace_id, parent_span_id, attributes, start_time "
            "FROM spans WHERE trace_id = v.trace_id AND name = %s OFFSET 0) AS s"
        )
        with pg_copy.cursor(conn) as cursor:
            cursor.execute(query, [list(trace_ids), a.VLLM_SPAN_NAME])
            return [(t, p, attrs, start) for t, p, attrs, start in cursor.fetchall()]

    def insert_generations(
        self, conn: Connection, rows: Sequence[GenerationRow]
    ) -> list[NewGeneration]:
        return pg_copy.insert_generations(conn, rows)

    def fill_engine_facts(self, conn: Connection, facts: Sequence[EngineFacts]) -> None:
        if not facts:
            return
        names = ", ".join(_FACT_TYPES)
        arrays = ", ".join(f"%b::{kind}[]" for kind in _FACT_TYPES.values())
        fields = ", ".join(f"{name} = COALESCE(g.{name}, v.{name})" for name in ENGINE_FIELDS)
        # Only rows the facts complete: a join run twice (both sides of a race, a replayed
        # batch) writes no second row version, and a waiting run re-checks this and skips.
        gains = " OR ".join(
            f"(g.{name} IS NULL AND v.{name} IS NOT NULL)" for name in ENGINE_FIELDS
        )
        # Bounds known before planning, so a partitioned `generations` is read only near
        # the facts' spans (a per-row bound would not prune).
        starts = [fact["started_at"] for fact in facts]
        near = [min(starts) - ENGINE_SKEW, max(starts) + ENGINE_SKEW]
        with pg_copy.cursor(conn) as cursor:
            cursor.execute(
                f"UPDATE generations AS g SET {fields} FROM unnest({arrays}) AS v({names}) "
                f"WHERE g.trace_id = v.trace_id AND g.span_id = v.parent_span_id AND ({gains}) "
                "AND g.started_at BETWEEN %s AND %s",
                [*(_column(facts, name, kind) for name, kind in _FACT_TYPES.items()), *near],
            )

    def json_has_any_key(self, column: Any, keys: Sequence[str]) -> ColumnElement[bool]:
        result: ColumnElement[bool] = column.op("?|")(_text_array(keys))
        return result

    def json_without_keys(self, column: Any, keys: Sequence[str]) -> ColumnElement[Any]:
        result: ColumnElement[Any] = column.op("-")(_text_array(keys))
        return result

    def epoch_bucket(self, column: Any, step: int) -> ColumnElement[int]:
        return cast(func.floor(extract("epoch", column) / step) * step, BigInteger)

    def percentiles(self, value: Any, probs: Sequence[float]) -> ColumnElement[Any] | None:
        grid = cast(postgresql.array([float(p) for p in probs]), postgresql.ARRAY(Float))
        return func.percentile_cont(grid).within_group(value)


def _pair_key(conn: Connection) -> str:
    # A partitioned `pairs` is keyed on (id, created_at) (`gate.db.partitions.LAYOUTS`):
    # a stub and its pair span carry the same `created_at`, the pair's start.
    key = partitions.LAYOUTS["pairs"].key if partitions.period_s(conn, "pairs") else ("id",)
    return ", ".join(key)


def _text_array(keys: Sequence[str]) -> Any:
    return bindparam("content_keys", list(keys), type_=postgresql.ARRAY(Text))


def _wrote(session: Session) -> bool:
    """Whether `session`'s transaction has written (its pending rows flushed first): a
    transaction gets an id at its first write, and only its own connection sees its rows."""
    session.flush()
    if not session.in_transaction():
        return False
    xid = session.execute(text("SELECT pg_current_xact_id_if_assigned()")).scalar()
    return xid is not None


def _insert(
    conn: Connection, table: str, columns: dict[str, str], rows: Sequence[Any], tail: str
) -> None:
    if not rows:
        return
    names = ", ".join(columns)
    # JSON travels as text and is cast once selected; arrays go in binary (%b), which
    # psycopg dumps in C, where the text format escapes every element in Python.
    arrays = ", ".join(f"%b::{'text' if kind == 'jsonb' else kind}[]" for kind in columns.values())
    selected = ", ".join(f"{n}::jsonb" if kind == "jsonb" else n for n, kind in columns.items())
    rows = sorted(rows, key=lambda row: str(row["id"]))  # lock order, as in pg_copy
    with pg_copy.cursor(conn) as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({names}) SELECT {selected} "
            f"FROM unnest({arrays}) AS v({names}) {tail}",
            [_column(rows, name, kind) for name, kind in columns.items()],
        )


def _column(rows: Sequence[Any], name: str, kind: str) -> list[Any]:
    if kind == "jsonb":
        return [None if row[name] is None else pg_copy.dump_json(row[name]) for row in rows]
    return [row[name] for row in rows]
