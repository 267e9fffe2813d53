"""Postgres bulk path: binary COPY into temporary staging tables, then idempotent INSERT.

Column lists and their binary types come from the ORM tables (`gate.db.rows`)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from operator import attrgetter
from typing import Any

import orjson
from sqlalchemy import Column, Connection, Table
from sqlalchemy.dialects import postgresql

from gate.db.rows import (
    GENERATION_COLUMNS,
    GENERATIONS,
    SPAN_COLUMNS,
    SPANS,
    GenerationRow,
    NewGeneration,
    SpanRow,
)

# The binary COPY/unnest type of a column, from its Postgres DDL type; JSON travels as text.
_BINARY_TYPES = {
    "UUID": "uuid", "INTEGER": "int4", "BIGINT": "int8", "FLOAT": "float8",
    "DOUBLE PRECISION": "float8", "BOOLEAN": "bool", "TIMESTAMP WITH TIME ZONE": "timestamptz",
    "JSONB": "jsonb",
}  # fmt: skip


def binary_type(column: Column[Any]) -> str:
    """The type a column's values are sent as (`text` for strings, enums and JSON text)."""
    ddl = column.type.compile(dialect=postgresql.dialect())  # type: ignore[no-untyped-call]
    return _BINARY_TYPES.get(ddl, "text")


def binary_types(table: Table, names: Sequence[str]) -> dict[str, str]:
    """The binary type of each named column of `table`, in the order named."""
    return {name: binary_type(table.c[name]) for name in names}


_SPAN_TYPES = binary_types(SPANS, SPAN_COLUMNS)
_GENERATION_TYPES = binary_types(GENERATIONS, GENERATION_COLUMNS)
_JSON_COLUMNS = frozenset(
    name for name, kind in (*_SPAN_TYPES.items(), *_GENERATION_TYPES.items()) if kind == "jsonb"
)
_SPAN_FIELDS = attrgetter(*SPAN_COLUMNS[:-1])  # a span row carries all but received_at
# The JSON columns of `spans` (checked against the table in tests/gate/db/test_rows.py).
SPAN_JSON = ("attributes", "resource", "extra")
_ATTRIBUTES, _RESOURCE, _EXTRA = map(SPAN_COLUMNS.index, SPAN_JSON)
_GENERATION_JSON = tuple(i for i, name in enumerate(GENERATION_COLUMNS) if name in _JSON_COLUMNS)

_KEY = ("trace_id", "span_id")
_SPANS_STAGE = "specgate_spans_stage"
_GENERATIONS_STAGE = "specgate_generations_stage"


def insert_spans(conn: Connection, rows: Sequence[SpanRow], received_at: datetime) -> int:
    """COPY `rows` into staging, insert the ones not stored yet; return how many were new."""
    _ensure_stages(conn)
    resources: dict[int, str] = {}
    with cursor(conn) as cur:
        copy_sql = f"COPY {_SPANS_STAGE} ({', '.join(SPAN_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
        with cur.copy(copy_sql) as copy:
            copy.set_types(_stage_types(_SPAN_TYPES))
            for row in rows:
                copy.write_row(_span_tuple(row, received_at, resources))
        # No conflict target: on partitioned `spans` the key also holds `start_time`.
        cur.execute(_insert_select("spans", SPAN_COLUMNS, _SPANS_STAGE, _KEY, target=False))
        inserted: int = cur.rowcount
    return max(inserted, 0)


def insert_generations(conn: Connection, rows: Sequence[GenerationRow]) -> list[NewGeneration]:
    """Insert generations not stored yet; return (id, pair id, trace id, span id) of new ones."""
    if not rows:
        return []
    _ensure_stages(conn)
    columns = ", ".join(GENERATION_COLUMNS)
    with cursor(conn) as cur:
        copy_sql = f"COPY {_GENERATIONS_STAGE} ({columns}) FROM STDIN (FORMAT BINARY)"
        with cur.copy(copy_sql) as copy:
            copy.set_types(_stage_types(_GENERATION_TYPES))
            for row in rows:
                copy.write_row(_generation_tuple(row))
        # No conflict target: on partitioned `generations` the key also holds `started_at`.
        insert = _insert_select(
            "generations", GENERATION_COLUMNS, _GENERATIONS_STAGE, _KEY, target=False
        )
        cur.execute(insert + " RETURNING id, pair_id, trace_id, span_id")
        return [(int(r[0]), r[1], str(r[2]), str(r[3])) for r in cur.fetchall()]


def _span_tuple(row: SpanRow, received_at: datetime, resources: dict[int, str]) -> list[Any]:
    values = [*_SPAN_FIELDS(row), received_at]
    values[_ATTRIBUTES] = dump_json(row.attributes)
    # Spans of one resource share its dict: dump it once per batch.
    resource = resources.get(id(row.resource))
    if resource is None:
        resource = resources[id(row.resource)] = dump_json(row.resource)
    values[_RESOURCE] = resource
    if row.extra is not None:
        values[_EXTRA] = dump_json(row.extra)
    return values


def _generation_tuple(row: GenerationRow) -> list[Any]:
    values = [row[column] for column in GENERATION_COLUMNS]  # type: ignore[literal-required]
    for index in _GENERATION_JSON:
        if values[index] is not None:
            values[index] = dump_json(values[index])
    return values


def _stage_types(types: dict[str, str]) -> list[str]:
    return ["text" if kind == "jsonb" else kind for kind in types.values()]


def dump_json(value: Any) -> str:
    """Return `value` as JSON text for a JSONB column (orjson: the hot path of every span)."""
    try:
        text = orjson.dumps(value)
    except TypeError:  # an integer outside 64 bits (a request body may hold one)
        return _dump_exact(value)
    # JSONB keeps a number's digits, not its notation: `1e+16` would come back as the
    # integer 10000000000000000. Rare (a double of 1e16 or more), so checked on the text.
    return _dump_exact(value) if b"e+" in text else text.decode()


def _dump_exact(value: Any) -> str:
    try:
        return orjson.dumps(_exact(value)).decode()
    except TypeError:
        return json.dumps(_finite(value))


def _exact(value: Any) -> Any:
    """Return `value` with large doubles written with a fraction, and big integers whole."""
    if isinstance(value, float):
        if math.isfinite(value) and abs(value) >= 1e16:
            # The shortest round-trip digits, written out: `10000000000000000.0` stays a double.
            return orjson.Fragment(f"{Decimal(repr(value)):f}.0")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value if -(2**63) <= value < 2**64 else orjson.Fragment(str(value))
    if isinstance(value, dict):
        return {key: _exact(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_exact(item) for item in value]
    return value


def _finite(value: Any) -> Any:
    # What orjson cannot write at all goes through `json`, with NaN as null as orjson does.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _insert_select(
    table: str, columns: Iterable[str], stage: str, key: Sequence[str], *, target: bool = True
) -> str:
    names = list(columns)
    selected = [f"{name}::jsonb" if name in _JSON_COLUMNS else name for name in names]
    conflict = f"({', '.join(key)})" if target else ""
    # Key order makes concurrent writers take a table's row locks in the same order; across
    # tables two batches can still deadlock, and the writer runs the loser again.
    return (
        f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(selected)} FROM {stage} "
        f"ORDER BY {', '.join(key)} ON CONFLICT {conflict} DO NOTHING"
    )


def _ensure_stages(conn: Connection) -> None:
    # Cheap when they exist; not cached per connection, since a rolled-back batch that
    # created them also rolls back their creation.
    span_columns = _stage_columns(_SPAN_TYPES)
    generation_columns = _stage_columns(_GENERATION_TYPES)
    with cursor(conn) as cur:
        for stage, columns in (
            (_SPANS_STAGE, span_columns),
            (_GENERATIONS_STAGE, generation_columns),
        ):
            # A staged row is read once, within the transaction: compressing its 1-2 KB of
            # JSON (past Postgres' default 2 KB threshold) would cost more than the copy.
            cur.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {stage} ({columns}) "
                "WITH (toast_tuple_target = 8160) ON COMMIT DELETE ROWS"
            )


def _stage_columns(types: dict[str, str]) -> str:
    kinds = _stage_types(types)
    return ", ".join(f"{name} {kind}" for name, kind in zip(types, kinds, strict=True))


def cursor(conn: Connection) -> Any:
    """Return a psycopg cursor on the connection's current transaction."""
    return conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
