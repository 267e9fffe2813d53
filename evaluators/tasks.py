"""Celery tasks: take IDs, open their own transaction, delegate to the service."""

from __future__ import annotations

import logging
import uuid

from evaluators import service
from evaluators.celery_app import EVALUATE_PAIR, sessions, specgate_task
from gate.db.engine import transaction

log = logging.getLogger(__name__)


@specgate_task(EVALUATE_PAIR)
def evaluate_pair_task(pair_id: str) -> int:
    """Evaluate one closed pair; return how many evaluations this run stored."""
    with transaction(sessions()) as session:
        stored = service.evaluate_pair(session, pair_id=uuid.UUID(pair_id))
    inserted = sum(item.inserted for item in stored)
    log.info(
        "evaluations_stored pair_id=%s inserted=%d kept=%d",
        pair_id,
        inserted,
        len(stored) - inserted,
    )
    return inserted
