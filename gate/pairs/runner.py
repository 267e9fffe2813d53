"""Drive the pair life cycle in a running process: landed spans in, evaluations out.

Deadline sweeps are periodic work (`gate.periodic`).

The collectors call `on_landed` after each committed batch. Completed pairs are handed to
Celery over Redis when configured; in the embedded default they are evaluated by one
background thread of this process, so the span writer never waits on an evaluator.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy.orm import Session, sessionmaker

from gate.db.engine import transaction
from gate.pairs.service import Enqueue, complete_ready
from gate.settings import Settings

log = logging.getLogger(__name__)


class InProcessEvaluations:
    """Evaluate pairs on a background thread (the embedded default's worker)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specgate-eval")

    def __call__(self, pair_ids: Sequence[uuid.UUID]) -> None:
        """Queue evaluations; returns at once."""
        for pair_id in pair_ids:
            self._pool.submit(self._evaluate, pair_id)

    def _evaluate(self, pair_id: uuid.UUID) -> None:
        from evaluators import service  # the evaluators load only where they run

        try:
            with transaction(self._sessions) as session:
                service.evaluate_pair(session, pair_id=pair_id)
        except Exception:  # one bad pair must not stop the others
            log.exception("evaluation_failed pair_id=%s", pair_id)

    def drain(self) -> None:
        """Wait for queued evaluations to finish (shutdown, tests, the demo)."""
        self._pool.shutdown(wait=True)


def evaluation_queue(settings: Settings, sessions: sessionmaker[Session]) -> Enqueue:
    """Return where completed pairs go: Celery with Redis, else this process."""
    if settings.redis_url:
        from gate.worker.app import make_celery, pair_enqueuer

        return pair_enqueuer(make_celery(settings))
    from evaluators.sandbox import configure_from  # the evaluators run here: box them so

    configure_from(settings)
    return InProcessEvaluations(sessions)


class PairLifecycle:
    """Complete pairs as their generations land (the collectors' `on_landed`)."""

    def __init__(self, sessions: sessionmaker[Session], enqueue: Enqueue) -> None:
        self._sessions = sessions
        self._enqueue = enqueue

    def on_landed(self, generation_ids: list[int], pair_ids: list[uuid.UUID]) -> None:
        """Complete what is ready, then enqueue its evaluation after commit."""
        if not pair_ids:
            return
        try:
            with transaction(self._sessions) as session:
                complete_ready(session, pair_ids=pair_ids, enqueue=self._enqueue)
        except Exception:  # the writer's batch is already stored; the sweep catches up
            log.exception("pair_completion_failed pairs=%d", len(pair_ids))
