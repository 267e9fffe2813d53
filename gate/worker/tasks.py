"""Celery tasks: take IDs, open their own transaction, delegate to a service.

The evaluation of a pair, and one task per row of the job table (`gate.periodic.JOBS`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from celery import Celery, current_app

from evaluators import service
from gate.db.engine import transaction
from gate.periodic import JOBS, JobContext, PeriodicJob
from gate.routing.deployment import publisher
from gate.worker.runtime import QUEUE, runtime_settings, sessions, specgate_task

EVALUATE_PAIR = "specgate.evaluate_pair"

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


def enqueue_pair_evaluation(app: Celery, pair_id: uuid.UUID) -> None:
    """Queue the evaluation of a pair; call after its rows commit."""
    app.send_task(EVALUATE_PAIR, args=[str(pair_id)], queue=QUEUE)


def enqueue_pairs(app: Celery, pair_ids: Sequence[uuid.UUID]) -> None:
    """Queue the evaluation of each pair (the job table's `enqueue`)."""
    for pair_id in pair_ids:
        enqueue_pair_evaluation(app, pair_id)


def _context() -> JobContext:
    settings, factory = runtime_settings(), sessions()
    enqueue = lambda ids: enqueue_pairs(current_app, ids)  # noqa: E731
    return JobContext(settings, factory, publisher(settings, factory), enqueue)


def _register(job: PeriodicJob) -> Any:
    def run() -> int:
        return job.run(_context())

    run.__name__ = run.__qualname__ = f"{job.name}_task"
    run.__doc__ = f"Run the periodic job {job.name!r} once."
    return specgate_task(job.task)(run)


PERIODIC_TASKS = {job.task: _register(job) for job in JOBS}
