"""Build the gateway from settings: DB-backed routing, Redis subscriber, span export."""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from prometheus_client import CollectorRegistry
from sqlalchemy.orm import Session, sessionmaker

from gate.api.deps import Services
from gate.db.engine import engine_from_settings, session_factory
from gate.errors import ConfigError
from gate.gateway.app import ProxyDispatch, create_gateway_app, route_health_for
from gate.routing.deployment import DeploymentId
from gate.routing.pubsub import LocalBus, Publisher, RedisPublisher, RedisSubscriber, Subscriber
from gate.routing.sync import RoutingState, db_loader
from gate.settings import Settings, load_settings
from gate.telemetry.otlp_encode import LeanOTLPSpanExporter


def tracer_provider(settings: Settings, exporter: SpanExporter | None = None) -> TracerProvider:
    """Return a provider exporting in batches, over OTLP/HTTP unless an exporter is given."""
    if exporter is None:
        if not settings.otlp_endpoint:
            raise ConfigError("no span exporter: set SPECGATE_OTLP_ENDPOINT")
        exporter = LeanOTLPSpanExporter(endpoint=traces_url(settings.otlp_endpoint))
    provider = TracerProvider(resource=Resource.create({"service.name": "specgate-gateway"}))
    # Batches of 512: encoding one holds the GIL for ~10 ms, not the ~40 ms of 2,048.
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=65536, max_export_batch_size=512)
    )
    return provider


def embedded_export(
    settings: Settings, sessions: sessionmaker[Session], publisher: Publisher
) -> tuple[SpanExporter, list[Callable[[], None]]]:
    """The embedded default: spans go straight to an in-process writer into the store,
    whose landed generations complete pairs and queue their evaluations; without a broker,
    the periodic jobs (`gate.periodic.JOBS`) run in this process too."""
    from collectors.pipeline import open_pipeline
    from gate.pairs.runner import InProcessEvaluations, PairLifecycle, evaluation_queue
    from gate.periodic import start_without_broker

    enqueue = evaluation_queue(settings, sessions)
    pairs = PairLifecycle(sessions, enqueue)
    pipeline = open_pipeline(
        settings,
        registry=CollectorRegistry(),
        on_landed=pairs.on_landed,
    )
    closers: list[Callable[[], None]] = [pipeline.close]
    stop_periodic = start_without_broker(settings, sessions, publisher, enqueue)
    if stop_periodic is not None:
        closers.insert(0, stop_periodic)
    if isinstance(enqueue, InProcessEvaluations):
        closers.append(enqueue.drain)
    return pipeline.exporter(), closers


def traces_url(endpoint: str) -> str:
    """Accept a collector base URL or its full /v1/traces URL."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


def build_gateway_app(
    settings: Settings | None = None, *, exporter: SpanExporter | None = None
) -> ProxyDispatch:
    """Build a gateway app from settings (the `specgate serve` entry point)."""
    settings = settings or load_settings()
    factory = session_factory(engine_from_settings(settings))
    # With Redis, changes reach every gateway process; without it, this process's own
    # control API still reaches its gateway at once, and other processes poll.
    bus = LocalBus()
    publisher: Publisher = bus
    subscriber: Subscriber = bus
    if settings.redis_url:
        deployment = DeploymentId(factory)
        publisher = RedisPublisher(settings.redis_url, deployment=deployment)
        subscriber = RedisSubscriber(settings.redis_url, deployment=deployment)
    routing = RoutingState(
        db_loader(factory, secrets_dir=settings.route_secrets_dir),
        poll_interval_s=settings.state_poll_interval_s,
        stale_after_s=settings.state_stale_after_s,
        subscriber=subscriber,
    )
    health = route_health_for(settings)
    closers: list[Callable[[], None]] = []
    if exporter is None and not settings.otlp_endpoint:
        exporter, closers = embedded_export(settings, factory, publisher)
    return create_gateway_app(
        settings,
        routing=routing,
        tracer_provider=tracer_provider(settings, exporter),
        own_tracer_provider=True,
        control=Services(
            settings=settings,
            sessions=factory,
            publisher=publisher,
            routing=routing,
            health=health,
        ),
        on_shutdown=closers,
        health=health,
    )
