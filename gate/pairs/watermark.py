"""Stamping pairs ready for the gate, and the horizon up to which a fold may read them.

The gate folds a stage's pairs once each, in fold order (`evaluated_at`, `id`), and keeps
the last one folded as its watermark. A stamp that sorted before the watermark but
committed after the fold would never be folded, so on Postgres stamping and folding share
a per-rollout advisory lock. A stamping transaction takes it shared and reads the clock
only then; a fold takes it exclusive, which waits for every stamping transaction in flight
to commit, and reads its horizon while holding it. Every pair stamped at or before the
horizon is then committed (and visible to the fold's next statements under READ
COMMITTED), and every later stamp reads a later clock, so a fold that reads up to the
horizon misses none and, with the watermark, repeats none. Stamps use the database clock,
never a worker's. SQLite runs one writer at a time and its gate replays rather than
folds, so it stamps with the process clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session

from gate.db import storage
from gate.db.base import utcnow
from gate.db.enums import PairState
from gate.db.models import Pair
from gate.pairs import load, parity

# Advisory locks are keyed (namespace, rollout id); "SG" keeps them apart from others'.
LOCK_SPACE = 0x5347
_SHARED = text("SELECT pg_advisory_xact_lock_shared(CAST(:space AS integer), CAST(:id AS integer))")
_EXCLUSIVE = text("SELECT pg_advisory_xact_lock(CAST(:space AS integer), CAST(:id AS integer))")


def _single_writer(session: Session) -> bool:
    # One writer at a time commits in time order: no stamp can be in flight behind a fold.
    return storage.of(session).single_writer


def stamp_evaluated(session: Session, *, pair_ids: Sequence[uuid.UUID]) -> int:
    """Stamp closed pairs as ready for the gate, with their parity differences and loads;
    a pair keeps its first stamp."""
    if not pair_ids:
        return 0
    now: Any = utcnow()
    if not _single_writer(session):
        rollouts = session.scalars(
            select(Pair.rollout_id).where(Pair.id.in_(pair_ids)).distinct()
        ).all()
        # One order for everyone, so two stamping transactions cannot deadlock.
        for rollout_id in sorted(rollouts):
            session.execute(_SHARED, {"space": LOCK_SPACE, "id": rollout_id})
        now = func.clock_timestamp()
    stamped = list(
        session.scalars(
            update(Pair)
            .where(Pair.id.in_(pair_ids), Pair.evaluated_at.is_(None), Pair.state != PairState.OPEN)
            .values(evaluated_at=now)
            .returning(Pair.id)
            .execution_options(synchronize_session="fetch")
        )
    )
    # In the same transaction: the fold never sees a stamped pair without them.
    record_stamped(session, pair_ids=stamped)
    return len(stamped)


def hold_for_ratings(session: Session, *, rollout_id: int) -> None:
    """Hold the rollout's lock shared until commit, as a stamp does, before inserting a
    rating: a look that folds ratings by id (`gate.verdicts.feedback`) holds it exclusive,
    so no rating of the rollout with an id below the last it reads is still in flight."""
    if not _single_writer(session):
        session.execute(_SHARED, {"space": LOCK_SPACE, "id": rollout_id})


def record_stamped(session: Session, *, pair_ids: Sequence[uuid.UUID]) -> None:
    """Fix what the fold reads of newly stamped pairs: parity differences and loads."""
    parity.record(session, pair_ids=pair_ids)
    load.record(session, pair_ids=pair_ids)


def fold_horizon(session: Session, *, rollout_id: int) -> datetime:
    """Wait for the rollout's stamps in flight; return the time up to which all committed."""
    if _single_writer(session):
        return utcnow()
    session.execute(_EXCLUSIVE, {"space": LOCK_SPACE, "id": rollout_id})
    horizon = session.scalar(text("SELECT clock_timestamp()"))
    assert isinstance(horizon, datetime)
    return horizon
