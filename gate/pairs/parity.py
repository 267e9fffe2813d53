"""Sampled-output parity differences, fixed once when a pair is stamped for the gate.

The Postgres fold sums them (`gate.verdicts.aggregates`) instead of judging eligibility in
SQL: they come from the side fields the export writes (`gate.pairs.export`) through the
function replay reads them with (`gate.stats.record_columns.parity_values`), so eligibility has
one definition (`gate.parity`) and both paths compare the same pairs alike.
"""

from __future__ import annotations

import math
import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gate.db.models import Generation, Pair
from gate.pairs.export import SIDES, parity_fields
from gate.parity import STATISTICS
from gate.stats.record_columns import parity_values, partial_logprobs
from gate.verdicts.slices import pair_calls_since

Side = dict[str, Any]


# The key marking a pair whose log-probabilities fall short on a side (value 1.0).
PARTIAL = "partial_logprobs"


def differences(base: Side | None, cand: Side | None) -> dict[str, float] | None:
    """Return d = candidate minus baseline per statistic the pair may compare.

    {} when a side was sampled but nothing may be compared; None when neither side
    carries sampling settings (replay then has no parity cells either). `PARTIAL` is set
    where a side's log-probabilities do not cover its answer (`partial_logprobs`).
    """
    values = parity_values(base, cand)
    if values is None:
        return None
    out = {PARTIAL: 1.0} if partial_logprobs(base, cand) else {}
    for i, stat in enumerate(STATISTICS):
        b, c = values[2 * i], values[2 * i + 1]
        if math.isfinite(b) and math.isfinite(c):
            out[stat] = c - b
    return out


def record(session: Session, *, pair_ids: Sequence[uuid.UUID]) -> None:
    """Store the pairs' parity differences (`Pair.parity`) from their generations."""
    if not pair_ids:
        return
    created = session.scalars(select(Pair.created_at).where(Pair.id.in_(pair_ids))).all()
    if not created:
        return
    # Bounded by the pairs' start: a partitioned `generations` is read from their partitions.
    calls = Generation.pair_id.in_(pair_ids), Generation.started_at >= pair_calls_since(created)
    sides: dict[uuid.UUID, dict[str, Side]] = defaultdict(dict)
    for g in session.scalars(select(Generation).where(*calls)):
        assert g.pair_id is not None
        sides[g.pair_id][SIDES[g.cohort]] = parity_fields(g)
    rows = []
    for pair_id, found in sides.items():
        d = differences(found.get("baseline"), found.get("candidate"))
        if d is not None:
            rows.append({"id": pair_id, "parity": d})
    if rows:
        session.execute(update(Pair), rows)
