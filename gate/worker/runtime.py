"""What a task runs with: the process's settings and sessions, and the task decorator.

Tasks import this module, never the app (`gate.worker.app` imports the tasks).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from celery import shared_task
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from gate.db.engine import engine_from_settings, session_factory
from gate.errors import DatabaseUnavailable
from gate.settings import Settings

QUEUE = "evaluations"
# Transient failures worth retrying; bad input (unknown pair, bad policy) is not.
RETRY_ON = (OperationalError, DatabaseUnavailable, ConnectionError, TimeoutError)


class _Runtime:
    """The settings the app was built with, for the tasks' own sessions."""

    settings: Settings | None = None


def set_runtime_settings(settings: Settings) -> None:
    """Record the settings of this process's app; sessions are built again from them."""
    _Runtime.settings = settings
    sessions.cache_clear()


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
