"""Moved to `gate.worker.app`; kept for the callers (tests) that import it from here."""

from gate.worker.app import enqueue_pair_evaluation, make_celery, pair_enqueuer

__all__ = ["enqueue_pair_evaluation", "make_celery", "pair_enqueuer"]
