"""Write a batch's normalised rows inside its transaction, joining vLLM spans to generations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Table, bindparam, func, select, update
from sqlalchemy.dialects import sqlite

from collectors import pg_landing
from collectors.normalise import (
    ENGINE_FIELDS,
    PAIR_SPAN_FIELDS,
    NewGeneration,
    Normalised,
    engine_facts,
    merge_engine_facts,
)
from gate.db.models import Generation, Pair, RequestRecord, SpanRecord
from gate.telemetry import attributes as a

_REQUESTS: Table = RequestRecord.__table__  # type: ignore[assignment]
_PAIRS: Table = Pair.__table__  # type: ignore[assignment]
_GENERATIONS: Table = Generation.__table__  # type: ignore[assignment]
_SPANS: Table = SpanRecord.__table__  # type: ignore[assignment]
_CHUNK = 500

Key = tuple[str, str]


def land(conn: Connection, rows: Normalised) -> list[NewGeneration]:
    """Write requests, pairs, generations and engine facts; return the new generations."""
    # vLLM's span and the gateway's arrive in either order: facts already stored are merged
    # into generations before they are inserted; facts for earlier generations are updates.
    ops: Any = pg_landing if conn.dialect.name == "postgresql" else _SqliteOps
    ops.insert_requests(conn, rows.requests)
    ops.upsert_pairs(conn, rows.pairs)
    ops.insert_pair_stubs(conn, rows.pair_stubs)
    covered = {_fact_key(fact) for fact in rows.engine_facts}
    # Only generations still missing an engine-side field can gain from a stored vLLM span.
    wanted = {
        (g["trace_id"], g["span_id"])
        for g in rows.generations
        if any(g[name] is None for name in ENGINE_FIELDS)
    } - covered
    if wanted:
        merge_engine_facts(rows.generations, ops.stored_engine_facts(conn, wanted))
    new: list[NewGeneration] = ops.insert_generations(conn, rows.generations)
    inserted = {(trace_id, span_id) for _, _, trace_id, span_id in new}
    ops.apply_engine_facts(conn, [f for f in rows.engine_facts if _fact_key(f) not in inserted])
    return new


def _fact_key(fact: dict[str, Any]) -> Key:
    return (fact["trace_id"], fact["parent_span_id"])


class _SqliteOps:
    """The same operations in SQLAlchemy Core for SQLite (the embedded default)."""

    @staticmethod
    def insert_requests(conn: Connection, rows: list[dict[str, Any]]) -> None:
        if rows:
            conn.execute(sqlite.insert(_REQUESTS).on_conflict_do_nothing(), rows)

    @staticmethod
    def upsert_pairs(conn: Connection, rows: list[dict[str, Any]]) -> None:
        if rows:
            statement = sqlite.insert(_PAIRS)
            fields = {name: statement.excluded[name] for name in PAIR_SPAN_FIELDS}
            conn.execute(statement.on_conflict_do_update(index_elements=["id"], set_=fields), rows)

    @staticmethod
    def insert_pair_stubs(conn: Connection, rows: list[dict[str, Any]]) -> None:
        if rows:
            statement = sqlite.insert(_PAIRS)
            conn.execute(
                statement.on_conflict_do_update(
                    index_elements=["id"],
                    set_={"is_control": True},
                    where=statement.excluded.is_control & ~_PAIRS.c.is_control,
                ),
                rows,
            )

    @staticmethod
    def stored_engine_facts(conn: Connection, wanted: set[Key]) -> list[dict[str, Any]]:
        trace_ids = sorted({trace_id for trace_id, _ in wanted})
        facts: list[dict[str, Any]] = []
        for start in range(0, len(trace_ids), _CHUNK):
            query = select(_SPANS.c.trace_id, _SPANS.c.parent_span_id, _SPANS.c.attributes).where(
                _SPANS.c.trace_id.in_(trace_ids[start : start + _CHUNK]),
                _SPANS.c.name == a.VLLM_SPAN_NAME,
            )
            for trace_id, parent, attributes in conn.execute(query):
                if (trace_id, parent) in wanted:
                    facts.append(engine_facts(trace_id, parent, attributes))
        return facts

    @staticmethod
    def insert_generations(conn: Connection, rows: list[dict[str, Any]]) -> list[NewGeneration]:
        if not rows:
            return []
        table = _GENERATIONS
        statement = (
            sqlite.insert(table)
            .on_conflict_do_nothing(index_elements=["trace_id", "span_id"])
            .returning(table.c.id, table.c.pair_id, table.c.trace_id, table.c.span_id)
        )
        result = conn.execute(statement, rows)
        return [(int(r[0]), r[1], str(r[2]), str(r[3])) for r in result]

    @staticmethod
    def apply_engine_facts(conn: Connection, facts: Sequence[dict[str, Any]]) -> None:
        if not facts:
            return
        table = _GENERATIONS
        # Update bind names may not shadow column names, hence the `b_` prefix.
        values = {
            name: func.coalesce(table.c[name], bindparam(f"b_{name}")) for name in ENGINE_FIELDS
        }
        statement = (
            update(table)
            .where(table.c.trace_id == bindparam("b_trace_id"))
            .where(table.c.span_id == bindparam("b_parent_span_id"))
            .values(values)
        )
        conn.execute(statement, [{f"b_{k}": v for k, v in fact.items()} for fact in facts])
