"""Celery beat tasks of the gate: each opens its own sessions and delegates in a line."""

from __future__ import annotations

from celery import current_app

from evaluators.celery_app import pair_enqueuer, runtime_settings, sessions, specgate_task
from gate.cli.common import publisher
from gate.periodic import judge_running, purge, scrape, sweep_pairs, watch_controllers

GATE_ALL = "specgate.gate_all"
SWEEP_PAIRS = "specgate.sweep_pairs"
SCRAPE = "specgate.scrape"
WEEKLY_REPORT = "specgate.weekly_report"
PURGE = "specgate.purge"
CONTROLLER_WATCH = "specgate.controller_watch"


@specgate_task(GATE_ALL)
def gate_all_task() -> int:
    """Judge every running rollout once."""
    factory = sessions()
    return judge_running(factory, publisher(runtime_settings(), factory))


@specgate_task(SWEEP_PAIRS)
def sweep_pairs_task() -> int:
    """Drop pairs past their deadline; enqueue again evaluations that never ran."""
    return sweep_pairs(sessions(), pair_enqueuer(current_app), runtime_settings())


@specgate_task(SCRAPE)
def scrape_task() -> int:
    """Scrape every route's engine metrics."""
    return scrape(sessions())


@specgate_task(WEEKLY_REPORT)
def weekly_report_task() -> int:
    """Write and store last week's regression report."""
    from gate.reports.jobs import run_weekly

    return run_weekly(runtime_settings())


@specgate_task(PURGE)
def purge_task() -> int:
    """Purge content, spans and idempotency keys past their retention."""
    return purge(runtime_settings(), sessions())


@specgate_task(CONTROLLER_WATCH)
def controller_watch_task() -> int:
    """Hold running rollouts whose Kubernetes controller stopped checking in."""
    factory = sessions()
    return watch_controllers(factory, publisher(runtime_settings(), factory))
