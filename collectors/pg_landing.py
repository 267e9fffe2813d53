"""Postgres landing operations: one statement per table, the rows passed as typed arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from collectors import pg_bulk
from collectors.normalise import ENGINE_FIELDS, PAIR_SPAN_FIELDS, NewGeneration, engine_facts
from gate.telemetry import attributes as a

_REQUEST_COLUMNS = {
    "id": "uuid", "rollout_id": "int4", "endpoint": "text", "body": "jsonb", "inputs": "jsonb",
    "truncated": "jsonb", "segment": "text", "tenant": "text", "inflight_baseline": "int4",
    "inflight_candidate": "int4", "gateway_replica": "text", "created_at": "timestamptz",
}  # fmt: skip
_PAIR_COLUMNS = {
    "id": "uuid", "rollout_id": "int4", "request_id": "uuid", "stage": "int4", "state": "text",
    "is_control": "bool", "segment": "text", "created_at": "timestamptz",
    "deadline": "timestamptz",
}  # fmt: skip
_FACT_COLUMNS = {
    "trace_id": "text", "parent_span_id": "text", "queue_s": "float8",
    "input_tokens": "int4", "output_tokens": "int4",
}  # fmt: skip


def insert_requests(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert request rows not stored yet."""
    _insert(conn, "requests", _REQUEST_COLUMNS, rows, "ON CONFLICT (id) DO NOTHING")


def upsert_pairs(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert pairs from pair spans, or give a stub the facts only the pair span has."""
    fields = ", ".join(f"{name} = EXCLUDED.{name}" for name in PAIR_SPAN_FIELDS)
    _insert(conn, "pairs", _PAIR_COLUMNS, rows, f"ON CONFLICT (id) DO UPDATE SET {fields}")


def insert_pair_stubs(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert placeholder pairs (from route spans) where no pair row exists yet."""
    # A control call landing after its pair's stub marks the pair as a control pair.
    tail = (
        "ON CONFLICT (id) DO UPDATE SET is_control = true "
        "WHERE EXCLUDED.is_control AND NOT pairs.is_control"
    )
    _insert(conn, "pairs", _PAIR_COLUMNS, rows, tail)


def insert_generations(conn: Connection, rows: list[dict[str, Any]]) -> list[NewGeneration]:
    """Insert generations not stored yet; return the new ones."""
    return pg_bulk.insert_generations(conn, rows)


def stored_engine_facts(conn: Connection, wanted: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """Return facts of stored vLLM spans whose (trace id, parent span id) is wanted."""
    trace_ids = sorted({trace_id for trace_id, _ in wanted})
    # One primary-key probe per trace: the LATERAL with OFFSET 0 keeps the planner from
    # turning this into a scan of the whole spans table.
    query = (
        "SELECT s.trace_id, s.parent_span_id, s.attributes FROM unnest(%b::text[]) AS v(trace_id) "
        "CROSS JOIN LATERAL (SELECT trace_id, parent_span_id, attributes FROM spans "
        "WHERE trace_id = v.trace_id AND name = %s OFFSET 0) AS s"
    )
    with pg_bulk.cursor(conn) as cursor:
        cursor.execute(query, [trace_ids, a.VLLM_SPAN_NAME])
        found = cursor.fetchall()
    return [
        engine_facts(trace_id, parent, attributes)
        for trace_id, parent, attributes in found
        if (trace_id, parent) in wanted
    ]


def apply_engine_facts(conn: Connection, facts: Sequence[dict[str, Any]]) -> None:
    """Fill stored generations' engine-side fields from vLLM spans, keeping values they have."""
    if not facts:
        return
    names = ", ".join(_FACT_COLUMNS)
    arrays = ", ".join(f"%b::{kind}[]" for kind in _FACT_COLUMNS.values())
    fields = ", ".join(f"{name} = COALESCE(g.{name}, v.{name})" for name in ENGINE_FIELDS)
    with pg_bulk.cursor(conn) as cursor:
        cursor.execute(
            f"UPDATE generations AS g SET {fields} FROM unnest({arrays}) AS v({names}) "
            "WHERE g.trace_id = v.trace_id AND g.span_id = v.parent_span_id",
            [_column(facts, name, kind) for name, kind in _FACT_COLUMNS.items()],
        )


def _insert(
    conn: Connection, table: str, columns: dict[str, str], rows: Sequence[dict[str, Any]], tail: str
) -> None:
    if not rows:
        return
    names = ", ".join(columns)
    # JSON travels as text and is cast once selected; arrays go in binary (%b), which
    # psycopg dumps in C, where the text format escapes every element in Python.
    arrays = ", ".join(f"%b::{'text' if kind == 'jsonb' else kind}[]" for kind in columns.values())
    selected = ", ".join(f"{n}::jsonb" if kind == "jsonb" else n for n, kind in columns.items())
    rows = sorted(rows, key=lambda row: str(row["id"]))  # lock order, as in pg_bulk
    with pg_bulk.cursor(conn) as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({names}) SELECT {selected} "
            f"FROM unnest({arrays}) AS v({names}) {tail}",
            [_column(rows, name, kind) for name, kind in columns.items()],
        )


def _column(rows: Sequence[dict[str, Any]], name: str, kind: str) -> list[Any]:
    if kind == "jsonb":
        return [None if row[name] is None else pg_bulk.dump_json(row[name]) for row in rows]
    return [row[name] for row in rows]
