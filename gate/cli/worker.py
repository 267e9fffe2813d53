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
        bool, typer.Option(help="Also run the beat: gate, pair sweeps, scrapes (one per site).")
    ] = False,
    database_url: DatabaseOption = None,
) -> None:
    """Run Celery evaluator workers (needs SPECGATE_REDIS_URL)."""
    # Imported here: Celery is only loaded by the command that needs it.
    from celery.signals import setup_logging

    from evaluators.celery_app import QUEUE, make_celery

    settings = settings_with(database_url)
    if not settings.redis_url:
        raise ConfigError(
            "specgate worker needs SPECGATE_REDIS_URL; without Redis, evaluations run in-process"
        )
    celery = make_celery(settings, visibility_timeout_s=visibility_timeout)
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
        *(["--beat", f"--schedule={settings.home / 'celerybeat-schedule'}"] if beat else []),
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
