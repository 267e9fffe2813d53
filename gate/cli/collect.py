"""`specgate collect`: the OTLP/HTTP span receiver and writer, under uvicorn."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Annotated

import typer
from fastapi import FastAPI
from pydantic import SecretStr

from collectors.app import create_app
from collectors.workers import serve
from gate.cli.common import DatabaseOption, settings_with
from gate.db.engine import engine_from_settings, session_factory
from gate.errors import ConfigError
from gate.pairs.runner import PairLifecycle, evaluation_queue
from gate.periodic import start_without_broker
from gate.routing.deployment import publisher
from gate.settings import Settings, load_settings


def collect(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (4318 is OTLP/HTTP's).")] = 4318,
    database_url: DatabaseOption = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="SPECGATE_COLLECTOR_TOKEN",
            help="Bearer token senders must present (default: none required).",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Worker processes, each decoding and writing on its own core, with its own "
            "spool folder (default: SPECGATE_COLLECTOR_WORKERS, else 1; more than 1 needs "
            "Postgres).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Receive OTLP/HTTP spans on POST /v1/traces and write them to the database.

    A success is sent once the spans are committed or fsynced into the spool; 503
    with Retry-After when queue and spool are full.
    """
    settings = settings_with(database_url)
    if token:
        settings = settings.model_copy(update={"collector_token": SecretStr(token)})
    count = workers or settings.collector_workers
    if count > 1 and settings.embedded:
        raise ConfigError(
            "--workers above 1 needs Postgres (--database-url): SQLite takes one writer at a time"
        )
    # The periodic work (pair deadlines, the gate, retention) runs once, in this process.
    sessions = session_factory(engine_from_settings(settings))
    enqueue = evaluation_queue(settings, sessions)
    stop_periodic = start_without_broker(settings, sessions, publisher(settings, sessions), enqueue)
    typer.echo(f"specgate collect: listening on http://{host}:{port}/v1/traces ({count} worker(s))")
    factory: Callable[[], FastAPI] = partial(collector_app, settings)
    if count > 1:
        # Workers read their settings from the environment: pass the CLI's choices on.
        os.environ["SPECGATE_DATABASE_URL"] = settings.resolved_database_url()
        if token:
            os.environ["SPECGATE_COLLECTOR_TOKEN"] = token
        factory = worker_app
    try:
        code = serve(
            factory, workers=count, host=host, port=port, log_level=settings.log_level.lower()
        )
        if code:
            raise typer.Exit(code)
    finally:
        if stop_periodic is not None:
            stop_periodic()


def collector_app(settings: Settings) -> FastAPI:
    """Return one process's collector app: landed generations complete their pairs here."""
    # Evaluations go to Celery with Redis, else run in this process.
    sessions = session_factory(engine_from_settings(settings))
    pairs = PairLifecycle(sessions, evaluation_queue(settings, sessions))
    return create_app(settings, on_landed=pairs.on_landed)


def worker_app() -> FastAPI:
    """One worker of `specgate collect --workers N`, in its own process."""
    return collector_app(load_settings())
