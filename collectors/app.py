"""The standalone collector app: OTLP receiver, writer in the lifespan, metrics and health."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry

from collectors.pipeline import Pipeline, open_pipeline
from collectors.receipt import Receipt, Settled
from collectors.receiver import Acknowledge, create_router
from collectors.writer import LandedCallback
from gate.db.rows import SpanRow
from gate.settings import CollectorSettings, Settings
from gate.telemetry import prometheus


def create_app(
    settings: Settings,
    collector: CollectorSettings | None = None,
    *,
    on_landed: LandedCallback | None = None,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """Return the collector app; the span writer starts and stops with its lifespan."""
    collector = settings if collector is None else collector
    registry = registry or CollectorRegistry()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pipeline = open_pipeline(settings, collector, registry=registry, on_landed=on_landed)
        app.state.pipeline = pipeline
        try:
            yield
        finally:
            pipeline.close()

    app = FastAPI(title="specgate collector", lifespan=lifespan, docs_url=None, redoc_url=None)

    async def submit(rows: Sequence[SpanRow], on_settled: Settled | None) -> Receipt:
        pipeline: Pipeline = app.state.pipeline
        receipt, overflow = pipeline.writer.offer(rows, on_settled=on_settled)
        if overflow is not None:
            # Spooling fsyncs behind a lock the writer threads take: not on the event loop.
            await asyncio.to_thread(pipeline.writer.spill, overflow)
        return receipt

    def rejected(count: int) -> None:
        pipeline: Pipeline = app.state.pipeline
        pipeline.metrics.rejected.inc(count)

    token = collector.collector_token.get_secret_value() if collector.collector_token else None
    app.include_router(
        create_router(
            submit=submit,
            max_body_bytes=collector.collector_max_body_bytes,
            token=token,
            acknowledge=Acknowledge(
                durable=collector.collector_acknowledge == "durable",
                timeout_s=collector.collector_ack_timeout_s,
                retry_after_s=collector.collector_retry_after_s,
            ),
            on_rejected=rejected,
        )
    )

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        app.state.pipeline.count_default_rows()
        body, content_type = prometheus.exposition(registry)
        return Response(body, media_type=content_type)

    @app.get("/healthz")
    def healthz(request: Request) -> dict[str, object]:
        writer = request.app.state.pipeline.writer
        return {
            "status": "ok" if writer.database_up else "spooling",
            "pid": os.getpid(),  # which worker answered, under `--workers N`
            "database_up": writer.database_up,
            "queue_depth": len(writer.queue),
            "spool_segments": writer.spool.segments,
            "spool_bytes": writer.spool.bytes,
        }

    return app
