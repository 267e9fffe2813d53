"""`specgate worker`: run Celery evaluator workers against the Redis broker."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gate import logs
from gate.cli.common import DatabaseOption, settings_with
from gate.errors import ConfigError, GateError

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.callback(invoke_without_command=True)
def worker(
    concurrency: Annotated[int, typer.Option(help="Worker processes.")] = 2,
    loglevel: Annotated[
        str | None,
        typer.Option(
            help="Log level (default: SPECGATE_LOG_LEVEL, else INFO).", show_default=False
        ),
    ] = None,
    visibility_timeout: Annotated[
        float,
        typer.Option(help="Seconds before a message whose worker died is delivered again."),
    ] = 3600.0,
    hostname: Annotated[str | None, typer.Option(help="Worker node name.")] = None,
    beat: Annotated[
        bool,
        typer.Option(
            help="Also run the beat: the periodic jobs (gate, pair sweeps, scrapes, "
            "purges, weekly report; one per site)."
        ),
    ] = False,
    heartbeat_s: Annotated[
        int,
        typer.Option(
            min=1,
            help="Seconds between heartbeats: the worker's, and the longest the beat sleeps "
            "between ticks. Each writes a file under SPECGATE_HOME that liveness checks "
            "read (`python -m gate.worker.heartbeat worker beat`).",
        ),
    ] = 10,
    database_url: DatabaseOption = None,
) -> None:
    """Run Celery evaluator workers (needs SPECGATE_REDIS_URL)."""
    # Imported here: Celery is only loaded by the command that needs it.
    from celery.signals import setup_logging

    from evaluators.secrets import make_non_dumpable
    from gate.worker.app import QUEUE, make_celery
    from gate.worker.beat import HOME_KEY, HeartbeatScheduler
    from gate.worker.heartbeat import install_worker_heartbeat

    settings = settings_with(database_url)
    if not settings.redis_url:
        raise ConfigError(
            "specgate worker needs SPECGATE_REDIS_URL; without Redis, evaluations run in-process"
        )
    # Before the pool forks: its children inherit it, and they hold the secrets too.
    make_non_dumpable()
    celery = make_celery(settings, visibility_timeout_s=visibility_timeout)
    celery.conf.update({HOME_KEY: str(settings.home), "beat_max_loop_interval": heartbeat_s})
    # The beat's schedule and the heartbeats live there; a beat that cannot open its
    # schedule dies while the worker runs on.
    settings.home.mkdir(parents=True, exist_ok=True)
    install_worker_heartbeat(settings.home)
    scheduler = f"{HeartbeatScheduler.__module__}:{HeartbeatScheduler.__name__}"
    schedule = settings.home / "celerybeat-schedule"
    embedded_beat = ["--beat", f"--schedule={schedule}", f"--scheduler={scheduler}"]
    level = (loglevel or settings.log_level).upper()
    # Celery asks this signal's receivers before setting up logging its own way: specgate's
    # one format then holds for the worker and its pool processes too.
    setup_logging.connect(lambda **_: logs.configure(level), weak=False)
    argv = [
        "worker",
        f"--concurrency={concurrency}",
        f"--loglevel={level}",
        f"--queues={QUEUE}",
        "--pool=prefork",
        "--without-gossip",
        "--without-mingle",
        f"--heartbeat-interval={heartbeat_s}",
        *(embedded_beat if beat else []),
    ]
    celery.worker_main([*argv, f"--hostname={hostname}"] if hostname else argv)


def main() -> None:
    """Run the worker command; user-facing errors become one line and exit code 1."""
    try:
        app()
    except GateError as exc:
        print(f"specgate worker: error: {exc.message}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
