"""Periodic work: judge running rollouts, sweep pair deadlines, scrape engines, purge.

With Redis these run as Celery beat tasks (`gate.tasks`); in the embedded default one
background thread of `specgate serve` runs them. Each job opens its own transactions, and
a failing job is logged and retried at its next turn.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from sqlalchemy.orm import Session, sessionmaker

from gate.db.engine import transaction
from gate.logs import FailureLog
from gate.pairs.service import Enqueue, requeue_unevaluated, sweep_deadlines
from gate.routing.pubsub import Publisher
from gate.settings import Settings
from gate.verdicts.service import run_gate, running_rollouts

log = logging.getLogger(__name__)


def judge_running(sessions: sessionmaker[Session], publisher: Publisher | None) -> int:
    """Run the gate once on every running rollout; return how many were judged."""
    with sessions() as session:
        ids = list(running_rollouts(session))
    for rollout_id in ids:
        try:
            with transaction(sessions) as session:
                verdict = run_gate(session, rollout_id=rollout_id, publisher=publisher)
            log.info(
                "gate_verdict rollout=%d decision=%s pairs=%d",
                rollout_id,
                verdict.decision.value,
                verdict.n_pairs,
            )
        except Exception:  # one rollout's failure must not starve the others
            log.exception("gate_failed rollout=%d", rollout_id)
    return len(ids)


def watch_controllers(sessions: sessionmaker[Session], publisher: Publisher | None) -> int:
    """Hold running rollouts whose controller stopped checking in; return how many."""
    from gate.controllers.links import hold_silent

    with transaction(sessions) as session:
        held = hold_silent(session, publisher=publisher)
    for rollout_id in held:
        log.warning("controller_silent_hold rollout=%d", rollout_id)
    return len(held)


def sweep_pairs(sessions: sessionmaker[Session], enqueue: Enqueue, settings: Settings) -> int:
    """Drop pairs past their deadline (completing those whose completion was missed) and
    enqueue again evaluations that never ran; return how many pairs were dropped."""
    with transaction(sessions) as session:
        dropped = sweep_deadlines(session, enqueue=enqueue)
    with transaction(sessions) as session:
        requeue_unevaluated(
            session,
            enqueue=enqueue,
            after_s=settings.pair_requeue_after_s,
            max_requeues=settings.pair_requeue_max,
        )
    return dropped


def scrape(sessions: sessionmaker[Session], timeout_s: float = 5.0) -> int:
    """Scrape every route's /metrics once; return how many samples were stored."""
    from collectors.scrape_job import scrape_routes

    with httpx.Client(timeout=timeout_s) as client:
        return sum(scrape_routes(sessions, client).values())


def purge(settings: Settings, sessions: sessionmaker[Session]) -> int:
    """Purge captured content, old spans and idempotency keys; return rows touched."""
    from collectors.retention import run_purge
    from collectors.settings import load_collector_settings
    from gate.api.idempotency import purge_keys

    result = run_purge(settings, load_collector_settings())
    with sessions() as session, session.begin():
        keys = purge_keys(session, max_age_s=settings.idempotency_key_max_age_s)
    return keys + sum(value for value in vars(result).values() if isinstance(value, int))


@dataclass(frozen=True)
class Job:
    name: str
    every_s: float
    run: Callable[[], object]


def jobs(
    settings: Settings,
    sessions: sessionmaker[Session],
    publisher: Publisher | None,
    enqueue: Enqueue,
) -> list[Job]:
    """Return the periodic jobs of a process, with their intervals."""
    return [
        Job("gate", settings.gate_interval_s, lambda: judge_running(sessions, publisher)),
        Job(
            "controller_watch",
            settings.gate_interval_s,
            lambda: watch_controllers(sessions, publisher),
        ),
        Job(
            "sweep_pairs",
            settings.pair_sweep_interval_s,
            lambda: sweep_pairs(sessions, enqueue, settings),
        ),
        Job("scrape", settings.scrape_interval_s, lambda: scrape(sessions)),
        Job("purge", settings.purge_interval_s, lambda: purge(settings, sessions)),
    ]


class PeriodicLoop:
    """Run jobs at their intervals in one background thread (the embedded default)."""

    def __init__(self, job_list: list[Job]) -> None:
        self._jobs = job_list
        # A job failing every turn (the database is down) is logged when it starts failing,
        # when its error changes and when it recovers, not once per turn.
        self._failures = FailureLog(log)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="specgate-periodic", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread after the job in progress."""
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        due = {job.name: time.monotonic() + job.every_s for job in self._jobs}
        while not self._stop.is_set():
            now = time.monotonic()
            for job in self._jobs:
                if now >= due[job.name]:
                    due[job.name] = now + job.every_s
                    try:
                        job.run()
                    except Exception as exc:
                        self._failures.failed(job.name, "periodic_job_failed", exc)
                    else:
                        self._failures.succeeded(job.name, "periodic_job_recovered")
            self._stop.wait(max(0.05, min(due.values()) - time.monotonic()))


def start_without_broker(
    settings: Settings,
    sessions: sessionmaker[Session],
    publisher: Publisher | None,
    enqueue: Enqueue,
) -> Callable[[], None] | None:
    """Without Redis there is no beat: run the periodic jobs here (`enqueue`: where pairs
    the sweep catches up go). Return the stopper."""
    if settings.redis_url:
        return None
    loop = PeriodicLoop(jobs(settings, sessions, publisher, enqueue))
    loop.start()
    return loop.stop
