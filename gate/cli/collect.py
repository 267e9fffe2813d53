"""`specgate collect`: the OTLP/HTTP span receiver and writer, under uvicorn."""

from __future__ import annotations

from typing import Annotated

import typer
import uvicorn

from collectors.app import create_app
from collectors.settings import load_collector_settings
from gate.cli.common import DatabaseOption, publisher, settings_with
from gate.db.engine import engine_from_settings, session_factory
from gate.pairs.runner import PairLifecycle, evaluation_queue
from gate.periodic import start_without_broker


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
) -> None:
    """Receive OTLP/HTTP spans on POST /v1/traces and write them to the database."""
    settings = settings_with(database_url)
    overrides: dict[str, object] = {"collector_token": token} if token else {}
    # Landed generations complete their pairs here; evaluations go to Celery with Redis,
    # else run in this process.
    sessions = session_factory(engine_from_settings(settings))
    enqueue = evaluation_queue(settings, sessions)
    pairs = PairLifecycle(sessions, enqueue)
    stop_periodic = start_without_broker(settings, sessions, publisher(settings), enqueue)
    app = create_app(settings, load_collector_settings(**overrides), on_landed=pairs.on_landed)
    typer.echo(f"specgate collect: listening on http://{host}:{port}/v1/traces")
    try:
        # No access log: OTLP senders post every few seconds and would drown the events.
        uvicorn.run(
            app, host=host, port=port, log_level=settings.log_level.lower(), access_log=False
        )
    finally:
        if stop_periodic is not None:
            stop_periodic()
