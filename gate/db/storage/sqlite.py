"""The embedded SQLite storage: SQLAlchemy Core statements, one writer at a time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    ColumnElement,
    Connection,
    Engine,
    Integer,
    Table,
    bindparam,
    cast,
    create_engine,
    event,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from gate.db.rows import (
    ENGINE_FIELDS,
    FACT_COLUMNS,
    GENERATION_COLUMNS,
    GENERATIONS,
    PAIR_SPAN_FIELDS,
    PAIRS,
    REQUESTS,
    SPAN_COLUMNS,
    SPANS,
    EngineFacts,
    GenerationRow,
    NewGeneration,
    PairRow,
    RequestRow,
    SpanRow,
)
from gate.telemetry import attributes as a

_CHUNK = 500  # trace ids per IN (...): SQLite limits a statement's parameters
_SPAN_FIELDS = SPAN_COLUMNS[:-1]  # all but received_at
# A generation's JSON fields without a value are SQL NULL, as Postgres' COPY stores them
# (SQLAlchemy's JSON would write the JSON text `null`, which `IS NULL` does not see).
_SQL_NULL_JSON = {
    column.name: bindparam(column.name, type_=JSON(none_as_null=True))
    for column in GENERATIONS.columns
    if isinstance(column.type, JSON) and column.name in GENERATION_COLUMNS
}


class SqliteStorage:
    """SQLite: JSON as text, quantiles in Python, writers serialised by the database lock."""

    single_writer = True
    folds_in_sql = False
    partitions = False

    def create_engine(self, url: str, *, echo: bool) -> Engine:
        database = make_url(url).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, echo=echo, connect_args={"timeout": 30})
        event.listen(engine, "connect", _pragmas)
        return engine

    @contextmanager
    def snapshot(self, session: Session) -> Iterator[Session]:
        # The caller's connection. Inside a transaction it already reads one snapshot (WAL;
        # one that wrote holds the write lock). Outside one, the driver begins a transaction
        # only before a write, so an explicit BEGIN makes the reads one read transaction,
        # ended after them: the caller's session is left as it was found (a write of its
        # own later would otherwise have to upgrade a stale snapshot: SQLITE_BUSY).
        session.flush()  # the caller's pending rows: written in its own transaction, not ours
        driver: Any = session.connection().connection.driver_connection  # sqlite3's
        began = not driver.in_transaction
        if began:
            driver.execute("BEGIN")
        try:
            yield session
        finally:
            if began and driver.in_transaction:
                driver.execute("COMMIT")  # nothing written: it ends the read

    def insert(self, table: Table | type[Any]) -> sqlite.Insert:
        return sqlite.insert(table)

    def insert_spans(self, conn: Connection, rows: Sequence[SpanRow], received_at: datetime) -> int:
        values = [_span_values(row, received_at) for row in rows]
        result = conn.execute(sqlite.insert(SPANS).on_conflict_do_nothing(), values)
        return max(result.rowcount, 0)

    def insert_requests(self, conn: Connection, rows: Sequence[RequestRow]) -> None:
        if rows:
            conn.execute(sqlite.insert(REQUESTS).on_conflict_do_nothing(), rows)

    def upsert_pairs(self, conn: Connection, rows: Sequence[PairRow]) -> None:
        if rows:
            statement = sqlite.insert(PAIRS)
            fields = {name: statement.excluded[name] for name in PAIR_SPAN_FIELDS}
            conn.execute(statement.on_conflict_do_update(index_elements=["id"], set_=fields), rows)

    def insert_pair_stubs(self, conn: Connection, rows: Sequence[PairRow]) -> None:
        if rows:
            statement = sqlite.insert(PAIRS)
            conn.execute(
                statement.on_conflict_do_update(
                    index_elements=["id"],
                    set_={"is_control": True},
                    where=statement.excluded.is_control & ~PAIRS.c.is_control,
                ),
                rows,
            )

    def vllm_spans(
        self, conn: Connection, trace_ids: Sequence[str]
    ) -> list[tuple[str, str, dict[str, Any], datetime]]:
        found: list[tuple[str, str, dict[str, Any], datetime]] = []
        for start in range(0, len(trace_ids), _CHUNK):
            query = select(
                SPANS.c.trace_id, SPANS.c.parent_span_id, SPANS.c.attributes, SPANS.c.start_time
            ).where(
                SPANS.c.trace_id.in_(trace_ids[start : start + _CHUNK]),
                SPANS.c.name == a.VLLM_SPAN_NAME,
            )
            found.extend((t, p, attrs, start) for t, p, attrs, start in conn.execute(query))
        return found

    def insert_generations(
        self, conn: Connection, rows: Sequence[GenerationRow]
    ) -> list[NewGeneration]:
        if not rows:
            return []
        table = GENERATIONS
        statement = (
            sqlite.insert(table)
            .values(_SQL_NULL_JSON)
            .on_conflict_do_nothing(index_elements=["trace_id", "span_id"])
            .returning(table.c.id, table.c.pair_id, table.c.trace_id, table.c.span_id)
        )
        result = conn.execute(statement, rows)
        return [(int(r[0]), r[1], str(r[2]), str(r[3])) for r in result]

    def fill_engine_facts(self, conn: Connection, facts: Sequence[EngineFacts]) -> None:
        if not facts:
            return
        table = GENERATIONS
        # Update bind names may not shadow column names, hence the `b_` prefix.
        values = {
            name: func.coalesce(table.c[name], bindparam(f"b_{name}")) for name in ENGINE_FIELDS
        }
        gains = [
            table.c[name].is_(None) & bindparam(f"b_{name}").is_not(None) for name in ENGINE_FIELDS
        ]
        statement = (
            update(table)
            .where(table.c.trace_id == bindparam("b_trace_id"))
            .where(table.c.span_id == bindparam("b_parent_span_id"))
            .where(or_(*gains))  # only rows the facts complete: a second join writes nothing
            .values(values)
        )
        binds = [{f"b_{k}": v for k, v in fact.items() if k in FACT_COLUMNS} for fact in facts]
        conn.execute(statement, binds)

    def json_has_any_key(self, column: Any, keys: Sequence[str]) -> ColumnElement[bool]:
        return or_(*[func.json_type(column, path).is_not(None) for path in _paths(keys)])

    def json_without_keys(self, column: Any, keys: Sequence[str]) -> ColumnElement[Any]:
        return func.json_remove(column, *_paths(keys))

    def epoch_bucket(self, column: Any, step: int) -> ColumnElement[int]:
        seconds = cast(func.strftime("%s", column), Integer)
        return cast((seconds.op("/")(step)).op("*")(step), BigInteger)

    def percentiles(self, value: Any, probs: Sequence[float]) -> ColumnElement[Any] | None:
        return None


def _span_values(row: SpanRow, received_at: datetime) -> dict[str, Any]:
    values = {name: getattr(row, name) for name in _SPAN_FIELDS}
    values["received_at"] = received_at
    return values


def _paths(keys: Sequence[str]) -> list[str]:
    return [f'$."{key}"' for key in keys]


def _pragmas(dbapi_connection: Any, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
