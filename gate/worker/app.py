"""The Celery app, on the Redis broker (without Redis, evaluations run in-process instead:
`gate.pairs.runner`, and the embedded loop runs the job table: `gate.periodic`).

Delivery is at least once: tasks ack late, a worker lost mid-task gives its message back
(immediately when a pool child dies, after the visibility timeout when the whole worker
dies), so tasks must be idempotent. Nothing here runs at import: `make_celery` builds
the app from a process's settings.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from celery import Celery
from celery.schedules import crontab

from evaluators.sandbox import configure_from
from gate.errors import ConfigError
from gate.periodic import JOBS, Period, Weekly
from gate.settings import Settings
from gate.worker.runtime import QUEUE, set_runtime_settings
from gate.worker.tasks import enqueue_pair_evaluation, enqueue_pairs

__all__ = ["QUEUE", "beat_schedule", "enqueue_pair_evaluation", "make_celery", "pair_enqueuer"]

# The sandbox may take up to 60 s per side; the hard limit leaves room for both sides.
SOFT_TIME_LIMIT_S = 240
TIME_LIMIT_S = 300


def make_celery(settings: Settings, *, visibility_timeout_s: float = 3600.0) -> Celery:
    """Build the app on the settings' Redis broker."""
    if not settings.redis_url:
        raise ConfigError("the Celery app needs SPECGATE_REDIS_URL")
    set_runtime_settings(settings)
    configure_from(settings)
    # The tasks are registered (shared) when `gate.worker.tasks` is imported, above.
    app = Celery("specgate", include=["gate.worker.tasks"], set_as_current=True)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_soft_time_limit=SOFT_TIME_LIMIT_S,
        task_time_limit=TIME_LIMIT_S,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=QUEUE,
        broker_connection_retry_on_startup=True,
        beat_schedule=beat_schedule(settings),
    )
    # A message whose worker died comes back once the timeout passes; sweep for such
    # messages often enough that a low timeout (tests) takes effect quickly.
    sweep = max(1.0, min(10.0, visibility_timeout_s / 2))
    app.conf.broker_url = settings.redis_url
    app.conf.broker_transport_options = {
        "visibility_timeout": visibility_timeout_s,
        "unacked_restore_interval": sweep,
        "unacked_restore_throttle": 1,
    }
    return app


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """The tasks `specgate worker --beat` sends: the job table, with these settings."""
    return {
        job.task: {
            "task": job.task,
            "schedule": _celery_schedule(job.period(settings)),
            "options": {"queue": QUEUE},
        }
        for job in JOBS
    }


def _celery_schedule(period: Period) -> float | crontab:
    if isinstance(period, Weekly):
        # crontab counts days of the week from Sunday; `Weekly` from Monday.
        weekday = (period.weekday + 1) % 7
        return crontab(minute=period.minute, hour=period.hour, day_of_week=weekday)
    return period


def pair_enqueuer(app: Celery) -> Callable[[Sequence[uuid.UUID]], None]:
    """Return the `enqueue` callback `gate.pairs.service.complete_ready` takes."""
    return lambda pair_ids: enqueue_pairs(app, pair_ids)
