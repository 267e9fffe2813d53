"""Rehearsal rows: one per rollout, replaced by a newer recording. Never commits."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gate.db import storage
from gate.db.models import Rehearsal
from gate.db.rows import REHEARSAL_COLUMNS, REHEARSALS, RehearsalRow


def upsert(session: Session, row: RehearsalRow) -> None:
    """Insert the rollout's rehearsal, or replace the one stored."""
    insert = storage.of(session).insert(REHEARSALS).values(**row)
    replaced = {name: insert.excluded[name] for name in REHEARSAL_COLUMNS if name != "rollout_id"}
    session.execute(insert.on_conflict_do_update(index_elements=["rollout_id"], set_=replaced))


def latest(session: Session, *, rollout_id: int) -> Rehearsal | None:
    """Return the rehearsal recorded for a rollout, if any."""
    return session.get(Rehearsal, rollout_id, populate_existing=True)


def of_rollouts(session: Session, rollout_ids: list[int]) -> dict[int, Rehearsal]:
    """Return the rehearsals recorded for these rollouts, by rollout id."""
    found = session.scalars(select(Rehearsal).where(Rehearsal.rollout_id.in_(rollout_ids)))
    return {row.rollout_id: row for row in found}
