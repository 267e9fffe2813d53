"""The gateway's FastAPI app: proxy endpoints, /v1/models, /metrics, /healthz."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from opentelemetry.sdk.trace import TracerProvider
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from gate.api.app import install_control_api
from gate.api.deps import Services
from gate.errors import GateError
from gate.gateway import by_load
from gate.gateway.call import Gateway
from gate.gateway.errors import from_gate_error, method_not_allowed
from gate.gateway.fits import FitWorker
from gate.gateway.logprobs import RejectingRoutes
from gate.gateway.metrics import GatewayMetrics, exposition
from gate.gateway.mirror_pool import MirrorPool
from gate.gateway.proxy import handle
from gate.gateway.spans import Redactor, SpanEmitter
from gate.gateway.transport_factory import create_transport
from gate.health import gateway_liveness
from gate.routing.health import RouteHealth
from gate.routing.sync import RoutingState
from gate.settings import Settings


def create_gateway_app(
    settings: Settings,
    *,
    routing: RoutingState,
    tracer_provider: TracerProvider,
    metrics: GatewayMetrics | None = None,
    redact: Redactor | None = None,
    own_tracer_provider: bool = False,
    control: Services | None = None,
    on_shutdown: Sequence[Callable[[], None]] = (),
    health: RouteHealth | None = None,
) -> ProxyDispatch:
    """Build the gateway app; its lifespan owns the HTTP client and the routing sync."""
    gateway_metrics = metrics or GatewayMetrics()
    route_health = health or route_health_for(settings)
    route_health.on_change = gateway_metrics.set_route_down

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The read timeout bounds the wait for each chunk, so long generations are not cut.
        client = create_transport(
            settings.upstream_transport,
            connect_timeout_s=settings.upstream_connect_timeout_s,
            read_timeout_s=settings.upstream_timeout_s,
        )
        app.state.gateway = Gateway(
            settings=settings,
            routing=routing,
            client=client,
            mirror=MirrorPool(
                max_concurrency=settings.mirror_max_concurrency,
                max_queue=settings.mirror_max_queue,
                deadline_s=settings.mirror_deadline_s,
            ),
            spans=SpanEmitter(
                tracer_provider.get_tracer("specgate.gateway"),
                max_chars=settings.capture_max_chars,
                eval_max_chars=settings.eval_input_max_chars,
                redact=redact,
            ),
            metrics=gateway_metrics,
            inflight={},
            health=route_health,
            fits=FitWorker(
                max_pending=FITS_MAX_PENDING, on_skipped=gateway_metrics.exactness_skipped.inc
            ),
            rejecting=RejectingRoutes(),
        )
        await routing.start()
        # What exists now lives as long as the process: keep it out of the cyclic
        # collector's full passes, which otherwise stall every request ~150 ms each time.
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            await app.state.gateway.mirror.close()
            # The spans still waiting for their exactness fields end before the exporter.
            await asyncio.to_thread(app.state.gateway.fits.close)
            await routing.stop()
            await client.close()
            if own_tracer_provider:
                tracer_provider.shutdown()
            for close in on_shutdown:
                close()

    app = FastAPI(title="specgate", lifespan=lifespan)

    @app.exception_handler(GateError)
    async def gate_error(_request: Request, exc: GateError) -> Response:
        return from_gate_error(exc)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        aliases = sorted(routing.snapshot.by_alias)
        data = [{"id": a, "object": "model", "created": 0, "owned_by": "specgate"} for a in aliases]
        return JSONResponse({"object": "list", "data": data})

    @app.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    async def metrics_endpoint() -> Response:
        gateway_metrics.stale.set(1 if routing.is_stale() else 0)
        gateway_metrics.pubsub.set(1 if routing.pubsub_connected else 0)
        for alias, rollout in routing.snapshot.by_alias.items():
            killed = 1 if rollout.state.value == "killed" else 0
            labels = (str(rollout.rollout_id), alias)
            gateway_metrics.killed.labels(*labels).set(killed)
            gateway_metrics.killed_at.labels(*labels).set(rollout.killed_at)
            gateway_metrics.verdict_at.labels(*labels).set(rollout.verdict_at)
        by_load.export(gateway_metrics, routing.snapshot, time.time())
        body, content_type = exposition(gateway_metrics)
        return Response(body, media_type=content_type)

    if control is not None:
        install_control_api(app, control)
    else:

        @app.get("/healthz")
        async def healthz() -> dict[str, object]:
            return gateway_liveness(routing, route_health)

    return ProxyDispatch(app)


# Calls waiting for their exactness fields: past this many, a span ends without them.
FITS_MAX_PENDING = 1024


def route_health_for(settings: Settings) -> RouteHealth:
    """The gateway's route down state, with the settings' back-off."""
    return RouteHealth(
        backoff_s=settings.route_down_backoff_s, max_backoff_s=settings.route_down_backoff_max_s
    )


PROXY_PATHS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}


class ProxyDispatch:
    """Serve the proxy endpoints straight from ASGI, ahead of FastAPI's middleware stack
    (it costs more than the proxying itself); everything else goes to the FastAPI app."""

    def __init__(self, api: FastAPI) -> None:
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = PROXY_PATHS.get(scope.get("path", "")) if scope["type"] == "http" else None
        if endpoint is None:
            await self.api(scope, receive, send)
            return
        if scope["method"] != "POST":
            await method_not_allowed(scope["path"])(scope, receive, send)
            return
        try:
            response = await handle(self.api.state.gateway, Request(scope, receive), endpoint)
        except GateError as exc:
            response = from_gate_error(exc)
        await response(scope, receive, send)
