"""Postgres bulk path: binary COPY into temporary staging tables, then idempotent INSERT."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

import orjson
from sqlalchemy import Connection

from collectors.normalise import GENERATION_COLUMNS
from collectors.spans import SpanRow

SPAN_COLUMNS = (
    "trace_id", "span_id", "parent_span_id", "name", "kind", "service", "start_time",
    "end_time", "status_code", "status_message", "attributes", "resource", "extra",
    "received_at",
)  # fmt: skip
_SPAN_TYPES = (
    "text", "text", "text", "text", "int4", "text", "timestamptz",
    "timestamptz", "int4", "text", "text", "text", "text", "timestamptz",
)  # fmt: skip
_GENERATION_TYPES = {
    "rollout_id": "int4", "pair_id": "uuid", "request_id": "uuid", "route_id": "int4",
    "temperature": "float8", "top_p": "float8", "max_tokens": "int4", "seed": "int4",
    "stream": "bool", "ttft_s": "float8", "tpot_s": "float8", "e2e_s": "float8",
    "queue_s": "float8", "input_tokens": "int4", "output_tokens": "int4",
    "spec_drafts": "int4", "spec_draft_tokens": "int4", "spec_accepted_tokens": "int4",
    "output_truncated": "bool", "started_at": "timestamptz", "engine_ttft_s": "float8",
    "engine_tpot_s": "float8", "logprob_tokens": "int4", "logprob_sum": "float8",
}  # fmt: skip
_EXTRA = GENERATION_COLUMNS.index("output_extra")
_JSON_COLUMNS = frozenset({"attributes", "resource", "extra", "output_extra"})

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
            copy.set_types(_SPAN_TYPES)
            for row in rows:
                copy.write_row(_span_tuple(row, received_at, resources))
        cur.execute(_insert_select("spans", SPAN_COLUMNS, _SPANS_STAGE, _KEY))
        inserted: int = cur.rowcount
    return max(inserted, 0)


def insert_generations(
    conn: Connection, rows: Sequence[dict[str, Any]]
) -> list[tuple[int, uuid.UUID | None, str, str]]:
    """Insert generations not stored yet; return (id, pair id, trace id, span id) of new ones."""
    if not rows:
        return []
    _ensure_stages(conn)
    columns = ", ".join(GENERATION_COLUMNS)
    types = [_GENERATION_TYPES.get(column, "text") for column in GENERATION_COLUMNS]
    with cursor(conn) as cur:
        copy_sql = f"COPY {_GENERATIONS_STAGE} ({columns}) FROM STDIN (FORMAT BINARY)"
        with cur.copy(copy_sql) as copy:
            copy.set_types(types)
            for row in rows:
                copy.write_row(_generation_tuple(row))
        insert = _insert_select("generations", GENERATION_COLUMNS, _GENERATIONS_STAGE, _KEY)
        cur.execute(insert + " RETURNING id, pair_id, trace_id, span_id")
        return [(int(r[0]), r[1], str(r[2]), str(r[3])) for r in cur.fetchall()]


def _span_tuple(row: SpanRow, received_at: datetime, resources: dict[int, str]) -> tuple[Any, ...]:
    # Spans of one resource share its dict: dump it once per batch.
    resource = resources.get(id(row.resource))
    if resource is None:
        resource = resources[id(row.resource)] = dump_json(row.resource)
    return (
        row.trace_id,
        row.span_id,
        row.parent_span_id,
        row.name,
        row.kind,
        row.service,
        row.start_time,
        row.end_time,
        row.status_code,
        row.status_message,
        dump_json(row.attributes),
        resource,
        None if row.extra is None else dump_json(row.extra),
        received_at,
    )


def _generation_tuple(row: dict[str, Any]) -> tuple[Any, ...]:
    values = [row[column] for column in GENERATION_COLUMNS]
    extra = values[_EXTRA]
    values[_EXTRA] = None if extra is None else dump_json(extra)
    return tuple(values)


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


def _insert_select(table: str, columns: Iterable[str], stage: str, key: Sequence[str]) -> str:
    names = list(columns)
    selected = [f"{name}::jsonb" if name in _JSON_COLUMNS else name for name in names]
    # Key order makes concurrent writers take a table's row locks in the same order; across
    # tables two batches can still deadlock, and the writer runs the loser again.
    return (
        f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(selected)} FROM {stage} "
        f"ORDER BY {', '.join(key)} ON CONFLICT ({', '.join(key)}) DO NOTHING"
    )


def _ensure_stages(conn: Connection) -> None:
    # Cheap when they exist; not cached per connection, since a rolled-back batch that
    # created them also rolls back their creation.
    span_columns = ", ".join(
        f"{name} {'text' if name in _JSON_COLUMNS else kind}"
        for name, kind in zip(SPAN_COLUMNS, _SPAN_TYPES, strict=True)
    )
    generation_columns = ", ".join(
        f"{name} {_GENERATION_TYPES.get(name, 'text')}" for name in GENERATION_COLUMNS
    )
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


def cursor(conn: Connection) -> Any:
    """Return a psycopg cursor on the connection's current transaction."""
    return conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
