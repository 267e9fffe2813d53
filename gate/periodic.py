"""Periodic work: judge running rollouts, sweep pair deadlines, scrape engines, purge,
create time partitions ahead, write the weekly report, all declared once in `JOBS`.

With Redis, Celery beat sends them as tasks (`gate.worker`); in the embedded default one
background thread of `specgate serve` runs them. Each job opens its own transactions, and
a failing job is logged and retried at its next turn.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

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


def drive_traffic(
    sessions: sessionmaker[Session], publisher: Publisher | None, settings: Settings
) -> int:
    """Bring every traffic link's objects to its rollout's state; return how many writes."""
    from gate.controllers import kube, traffic
    from gate.errors import ConfigError

    if not traffic.has_links(sessions):
        return 0
    try:
        api = kube.connect(settings.kubeconfig)
    except ConfigError as exc:
        traffic.hold_all(sessions, publisher=publisher, reason=exc.message)
        log.warning("traffic_unconfigured reason=%s", exc.message)
        return 0
    try:
        return traffic.reconcile_all(
            sessions,
            api=api,
            publisher=publisher,
            confirm_timeout_s=settings.traffic_confirm_timeout_s,
        )
    finally:
        api.close()


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


def scrape(settings: Settings, sessions: sessionmaker[Session]) -> int:
    """Scrape every route's /metrics once; return how many samples were stored."""
    from collectors.scrape_job import scrape_routes

    with httpx.Client(timeout=settings.scrape_timeout_s) as client:
        written = scrape_routes(sessions, client, secrets_dir=settings.route_secrets_dir)
    return sum(written.values())


def purge(settings: Settings, sessions: sessionmaker[Session]) -> int:
    """Purge captured content, old spans and idempotency keys; return rows touched."""
    from collectors.retention import run_purge
    from gate.api.idempotency import purge_keys

    result = run_purge(settings)
    with sessions() as session, session.begin():
        keys = purge_keys(session, max_age_s=settings.idempotency_key_max_age_s)
    return keys + result.touched


def maintain_partitions(sessions: sessionmaker[Session]) -> int:
    """Create time partitions ahead on partitioned tables; return rows in default partitions."""
    from gate.db import partitions, storage

    engine = sessions.kw["bind"]
    if not storage.of(engine).partitions:
        return 0
    stray = 0
    for table in partitions.LAYOUTS:
        with engine.begin() as conn:
            made = partitions.ensure_ahead(conn, table, datetime.now(UTC))
            rows = partitions.default_rows(conn, table)
        for name in made:
            log.info("partition_created table=%s partition=%s", table, name)
        if rows:
            # Rows no partition holds: written far outside the created range (clock skew,
            # late spans older than the oldest partition); kept, and deleted by retention in
            # batches once past their age (`collectors.retention`).
            log.warning("partition_default_rows table=%s rows=%d", table, rows)
        stray += rows
    return stray


def weekly_report(settings: Settings) -> int:
    """Write and store last week's regression report; return its row id."""
    from gate.reports.jobs import run_weekly

    return run_weekly(settings)


@dataclass(frozen=True)
class Weekly:
    """A moment of every week, in UTC (`weekday`: Monday is 0)."""

    weekday: int
    hour: int
    minute: int = 0

    def seconds_after(self, now: datetime) -> float:
        """Return the seconds from `now` to this moment's next occurrence."""
        days = (self.weekday - now.weekday()) % 7
        moment = now.replace(hour=self.hour, minute=self.minute, second=0, microsecond=0)
        moment += timedelta(days=days)
        if moment <= now:
            moment += timedelta(days=7)
        return (moment - now).total_seconds()


# A number is an interval in seconds; a `Weekly` a moment of the week.
Period = float | Weekly


@dataclass(frozen=True)
class JobContext:
    """What a periodic job runs with, built by whoever runs it (beat's task, the loop)."""

    settings: Settings
    sessions: sessionmaker[Session]
    publisher: Publisher | None
    enqueue: Enqueue


@dataclass(frozen=True)
class PeriodicJob:
    """One row of the job table: its name, its Celery task, what it runs and how often."""

    name: str
    task: str
    run: Callable[[JobContext], int]
    period: Callable[[Settings], Period]


def _every(field: str) -> Callable[[Settings], Period]:
    return lambda settings: float(getattr(settings, field))


# Last week's report, Mondays 06:00 UTC.
WEEKLY_REPORT_AT = Weekly(weekday=0, hour=6)

# The periodic work of a site: Celery beat sends these tasks, and without a broker the
# embedded loop runs them in-process. Task names are part of the broker's contract.
JOBS: tuple[PeriodicJob, ...] = (
    PeriodicJob(
        "gate",
        "specgate.gate_all",
        lambda c: judge_running(c.sessions, c.publisher),
        _every("gate_interval_s"),
    ),
    PeriodicJob(
        "controller_watch",
        "specgate.controller_watch",
        lambda c: watch_controllers(c.sessions, c.publisher),
        _every("gate_interval_s"),
    ),
    PeriodicJob(
        "traffic",
        "specgate.drive_traffic",
        lambda c: drive_traffic(c.sessions, c.publisher, c.settings),
        _every("traffic_interval_s"),
    ),
    PeriodicJob(
        "sweep_pairs",
        "specgate.sweep_pairs",
        lambda c: sweep_pairs(c.sessions, c.enqueue, c.settings),
        _every("pair_sweep_interval_s"),
    ),
    PeriodicJob(
        "scrape",
        "specgate.scrape",
        lambda c: scrape(c.settings, c.sessions),
        _every("scrape_interval_s"),
    ),
    PeriodicJob(
        "purge",
        "specgate.purge",
        lambda c: purge(c.settings, c.sessions),
        _every("purge_interval_s"),
    ),
    PeriodicJob(
        "partitions",
        "specgate.partitions",
        lambda c: maintain_partitions(c.sessions),
        _every("partition_interval_s"),
    ),
    PeriodicJob(
        "weekly_report",
        "specgate.weekly_report",
        lambda c: weekly_report(c.settings),
        lambda _settings: WEEKLY_REPORT_AT,
    ),
)


@dataclass(frozen=True)
class Job:
    """A job as the embedded loop runs it: a name, its period and a call."""

    name: str
    period: Period
    run: Callable[[], object]

    def delay_s(self) -> float:
        """Return the seconds from now to this job's next run."""
        if isinstance(self.period, Weekly):
            return self.period.seconds_after(datetime.now(UTC))
        return self.period


def jobs(context: JobContext) -> list[Job]:
    """Return the job table bound to one process's context, for the embedded loop."""
    return [Job(job.name, job.period(context.settings), partial(job.run, context)) for job in JOBS]


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
        due = {job.name: time.monotonic() + job.delay_s() for job in self._jobs}
        while not self._stop.is_set():
            now = time.monotonic()
            for job in self._jobs:
                if now >= due[job.name]:
                    due[job.name] = now + job.delay_s()
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
    loop = PeriodicLoop(jobs(JobContext(settings, sessions, publisher, enqueue)))
    loop.start()
    return loop.stop
