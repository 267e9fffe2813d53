"""Write a batch's normalised rows inside its transaction; join vLLM spans after commit.

vLLM's `llm_request` span and the gateway's route-call span come from two exporters, so
they land in two batches, often at the same moment on two writer threads. Looked up inside
the batch transaction, neither side sees the other's uncommitted rows and both miss the
join. So the join runs after the batch commits, in a transaction of its own, from both
sides: the generations still missing an engine field look for stored vLLM spans, and
vLLM's facts look for stored generations. Under READ COMMITTED each statement sees every
transaction committed before it began; whichever batch commits second runs its join
after both commits, and sees both rows. The join only fills NULL fields, so running it
twice (both sides, a retried or replayed batch) changes nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection

from collectors.normalise import Normalised, NormaliseError, engine_facts
from gate.db.rows import ENGINE_FIELDS, EngineFacts, NewGeneration
from gate.db.storage import Storage

Key = tuple[str, str]


@dataclass(slots=True)
class PendingJoin:
    """What a batch joins once committed: generations missing engine fields, vLLM facts."""

    # (trace id, span id) of the batch's generations that no vLLM span in it completed.
    generations: set[Key] = field(default_factory=set)
    # Facts of the batch's vLLM spans whose generation this batch did not insert.
    facts: list[EngineFacts] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.generations or self.facts)


def land(
    conn: Connection, storage: Storage, rows: Normalised
) -> tuple[list[NewGeneration], PendingJoin]:
    """Write requests, pairs and generations; return the new generations and what to join."""
    storage.insert_requests(conn, rows.requests)
    storage.upsert_pairs(conn, rows.pairs)
    storage.insert_pair_stubs(conn, rows.pair_stubs)
    new = storage.insert_generations(conn, rows.generations)
    return new, _pending(rows, new)


def join(conn: Connection, storage: Storage, pending: PendingJoin) -> None:
    """Fill stored generations' missing engine fields from stored vLLM spans (after commit)."""
    stored = _stored_facts(conn, storage, pending.generations)
    storage.fill_engine_facts(conn, [*pending.facts, *stored])


def _pending(rows: Normalised, new: list[NewGeneration]) -> PendingJoin:
    # Facts of vLLM spans in the batch were merged into its generations by `normalise`.
    covered = {_fact_key(fact) for fact in rows.engine_facts}
    # Only generations still missing an engine-side field can gain from a stored vLLM span.
    missing = {
        (g["trace_id"], g["span_id"])
        for g in rows.generations
        if any(g[name] is None for name in ENGINE_FIELDS)
    }
    inserted = {(trace_id, span_id) for _, _, trace_id, span_id in new}
    late = [fact for fact in rows.engine_facts if _fact_key(fact) not in inserted]
    return PendingJoin(missing - covered, late)


def _stored_facts(conn: Connection, storage: Storage, wanted: set[Key]) -> list[EngineFacts]:
    if not wanted:
        return []
    trace_ids = sorted({trace_id for trace_id, _ in wanted})
    facts = []
    for trace_id, parent, attributes, started_at in storage.vllm_spans(conn, trace_ids):
        if (trace_id, parent) not in wanted:
            continue
        try:
            facts.append(engine_facts(trace_id, parent, attributes, started_at))
        except NormaliseError:
            # Counted as skipped when it landed; it must not fail the generation's batch.
            continue
    return facts


def _fact_key(fact: EngineFacts) -> Key:
    return (fact["trace_id"], fact["parent_span_id"])
