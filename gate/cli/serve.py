"""`specgate serve`: run the gateway under uvicorn."""

from __future__ import annotations

import os
from typing import Annotated

import typer
import uvicorn

from gate import logs
from gate.cli.common import DatabaseOption, settings_with
from gate.db import migrate
from gate.telemetry.prometheus import use_multiprocess_mode


def serve(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8080,
    workers: Annotated[
        int | None, typer.Option(help="Worker processes (default: SPECGATE_GATEWAY_WORKERS).")
    ] = None,
    otlp_endpoint: Annotated[
        str | None, typer.Option(help="Collector URL (default: SPECGATE_OTLP_ENDPOINT).")
    ] = None,
    database_url: DatabaseOption = None,
) -> None:
    """Run the OpenAI-compatible gateway (shadow mirror / canary with fallback)."""
    settings = settings_with(database_url)
    url = settings.resolved_database_url()
    migrate.require_current(url)
    # Children read their settings from the environment: pass the CLI's choices on.
    os.environ["SPECGATE_DATABASE_URL"] = url
    if otlp_endpoint:
        os.environ["SPECGATE_OTLP_ENDPOINT"] = otlp_endpoint
    count = workers or settings.gateway_workers
    if count > 1:
        use_multiprocess_mode()
    typer.echo(f"specgate gateway on http://{host}:{port} ({count} worker(s))")
    uvicorn.run(
        "gate.gateway.factory:build_gateway_app",
        factory=True,
        host=host,
        port=port,
        workers=count,
        log_level="warning",
        log_config=logs.dict_config(),
        access_log=False,
    )
