"""The Celery app: Redis broker when configured, eager in-process for the embedded default.

Delivery is at least once: tasks ack late, a worker lost mid-task gives its message back
(immediately when a pool child dies, after the visibility timeout when the whole worker
dies), so tasks must be idempotent. Nothing here runs at import: `make_celery` builds
the app from a process's settings.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from celery import Celery, shared_task
from celery.schedules import crontab
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from evaluators.sandbox import SandboxConfig, configure
from evaluators.secrets import configured_secrets
from gate.db.engine import engine_from_settings, session_factory
from gate.errors import DatabaseUnavailable
from gate.settings import Settings

EVALUATE_PAIR = "specgate.evaluate_pair"
QUEUE = "evaluations"
# The sandbox may take up to 60 s per side; the hard limit leaves room for both sides.
SOFT_TIME_LIMIT_S = 240
TIME_LIMIT_S = 300
# Transient failures worth retrying; bad input (unknown pair, bad policy) is not.
RETRY_ON = (OperationalError, DatabaseUnavailable, ConnectionError, TimeoutError)


class _Runtime:
    """The settings the app was built with, for the tasks' own sessions."""

    settings: Settings | None = None


def make_celery(settings: Settings, *, visibility_timeout_s: float = 3600.0) -> Celery:
    """Build the app; without a Redis URL tasks run eagerly in the calling process."""
    _Runtime.settings = settings
    sessions.cache_clear()
    configure(
        SandboxConfig(
            settings.sandbox_bwrap,
            settings.sandbox_uid,
            configured_secrets(settings),
            settings.sandbox_memory_total_mb,
        )
    )
    app = Celery("specgate", include=["evaluators.tasks", "gate.tasks"], set_as_current=True)
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
    if settings.redis_url:
        # A message whose worker died comes back once the timeout passes; sweep for
        # such messages often enough that a low timeout (tests) takes effect quickly.
        sweep = max(1.0, min(10.0, visibility_timeout_s / 2))
        app.conf.broker_url = settings.redis_url
        app.conf.broker_transport_options = {
            "visibility_timeout": visibility_timeout_s,
            "unacked_restore_interval": sweep,
            "unacked_restore_throttle": 1,
        }
    else:
        app.conf.update(broker_url="memory://", task_always_eager=True, task_eager_propagates=True)
    # Registers the shared tasks now, so eager callers find them before any worker starts.
    import evaluators.tasks  # noqa: F401
    import gate.tasks  # noqa: F401

    return app


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """The periodic tasks `specgate worker --beat` sends (names from `gate.tasks`)."""
    every = {
        "specgate.gate_all": settings.gate_interval_s,
        "specgate.controller_watch": settings.gate_interval_s,
        "specgate.sweep_pairs": settings.pair_sweep_interval_s,
        "specgate.scrape": settings.scrape_interval_s,
        "specgate.purge": settings.purge_interval_s,
    }
    schedule: dict[str, dict[str, Any]] = {
        name: {"task": name, "schedule": seconds, "options": {"queue": QUEUE}}
        for name, seconds in every.items()
    }
    # Last week's report, Mondays 06:00 UTC.
    schedule["specgate.weekly_report"] = {
        "task": "specgate.weekly_report",
        "schedule": crontab(minute=0, hour=6, day_of_week=1),
        "options": {"queue": QUEUE},
    }
    return schedule


def runtime_settings() -> Settings:
    """Return the settings this process's app was built with."""
    if _Runtime.settings is None:
        raise RuntimeError("make_celery() was not called in this process")
    return _Runtime.settings


@cache
def sessions() -> sessionmaker[Session]:
    """Return this process's session factory (built on first use, after any fork)."""
    return session_factory(engine_from_settings(runtime_settings()))


def specgate_task(name: str) -> Callable[[Callable[..., Any]], Any]:
    """Declare a task with the project's delivery, retry and time-limit defaults."""
    decorator: Callable[[Callable[..., Any]], Any] = shared_task(
        name=name,
        bind=False,
        acks_late=True,
        autoretry_for=RETRY_ON,
        retry_backoff=2,
        retry_backoff_max=300,
        retry_jitter=True,
        max_retries=8,
    )
    return decorator


def enqueue_pair_evaluation(app: Celery, pair_id: uuid.UUID) -> None:
    """Queue (or, eagerly, run) the evaluation of a pair; call after its rows commit."""
    if app.conf.task_always_eager:
        # send_task bypasses eager mode, so run the registered task in this process.
        app.tasks[EVALUATE_PAIR].apply(args=[str(pair_id)]).get()
    else:
        app.send_task(EVALUATE_PAIR, args=[str(pair_id)], queue=QUEUE)


def pair_enqueuer(app: Celery) -> Callable[[Sequence[uuid.UUID]], None]:
    """Return the `enqueue` callback `gate.pairs.service.complete_ready` takes."""

    def enqueue(pair_ids: Sequence[uuid.UUID]) -> None:
        for pair_id in pair_ids:
            enqueue_pair_evaluation(app, pair_id)

    return enqueue
