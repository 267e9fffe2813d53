"""Write a batch's normalised rows inside its transaction, joining vLLM spans to generations."""

from __future__ import annotations

from sqlalchemy import Connection

from collectors.normalise import Normalised, engine_facts, merge_engine_facts
from gate.db.rows import ENGINE_FIELDS, EngineFacts, NewGeneration
from gate.db.storage import Storage

Key = tuple[str, str]


def land(conn: Connection, storage: Storage, rows: Normalised) -> list[NewGeneration]:
    """Write requests, pairs, generations and engine facts; return the new generations."""
    # vLLM's span and the gateway's arrive in either order: facts already stored are merged
    # into generations before they are inserted; facts for earlier generations are updates.
    storage.insert_requests(conn, rows.requests)
    storage.upsert_pairs(conn, rows.pairs)
    storage.insert_pair_stubs(conn, rows.pair_stubs)
    covered = {_fact_key(fact) for fact in rows.engine_facts}
    # Only generations still missing an engine-side field can gain from a stored vLLM span.
    wanted = {
        (g["trace_id"], g["span_id"])
        for g in rows.generations
        if any(g[name] is None for name in ENGINE_FIELDS)
    } - covered
    if wanted:
        merge_engine_facts(rows.generations, _stored_facts(conn, storage, wanted))
    new = storage.insert_generations(conn, rows.generations)
    inserted = {(trace_id, span_id) for _, _, trace_id, span_id in new}
    late = [fact for fact in rows.engine_facts if _fact_key(fact) not in inserted]
    storage.fill_engine_facts(conn, late)
    return new


def _stored_facts(conn: Connection, storage: Storage, wanted: set[Key]) -> list[EngineFacts]:
    trace_ids = sorted({trace_id for trace_id, _ in wanted})
    return [
        engine_facts(trace_id, parent, attributes)
        for trace_id, parent, attributes in storage.vllm_spans(conn, trace_ids)
        if (trace_id, parent) in wanted
    ]


def _fact_key(fact: EngineFacts) -> Key:
    return (fact["trace_id"], fact["parent_span_id"])
