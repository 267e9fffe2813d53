"""A gateway wired to real routes (synthetic engines on 127.0.0.1) and a migrated store."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy.orm import sessionmaker

from gate.db.engine import make_engine
from gate.db.enums import RolloutMode, RouteRole
from gate.engines.sim import SimLog, SimProfile, create_sim_app
from gate.gateway.app import create_gateway_app
from gate.gateway.transport import TRANSPORTS, Transport, TransportName
from gate.gateway.transport_factory import create_transport
from gate.rollouts import service
from gate.rollouts.schemas import RolloutIn, RouteIn
from gate.rollouts.states import Action
from gate.routing.health import RouteHealth
from gate.routing.pubsub import LocalBus
from gate.routing.sync import RoutingState, db_loader
from gate.settings import Settings
from gate.telemetry import attributes as A
from tests.servers import closed_port, serving

ALIAS = "smol"
# The upstream transport of the gateways built here (and of `upstream_client`): modules
# whose tests every transport must pass use `pytest.mark.usefixtures("each_transport")`.
_transport: list[TransportName] = ["http1"]


@pytest.fixture(params=TRANSPORTS)
def each_transport(request: pytest.FixtureRequest) -> Iterator[TransportName]:
    _transport[0] = request.param
    try:
        yield request.param
    finally:
        _transport[0] = "http1"


def upstream_client(read_timeout_s: float = 5.0) -> Transport:
    """A route client of the current transport (see each_transport)."""
    return create_transport(_transport[0], connect_timeout_s=2.0, read_timeout_s=read_timeout_s)


@dataclass
class Stack:
    url: str
    baseline_url: str
    baseline_log: SimLog
    candidate_log: SimLog
    exporter: InMemorySpanExporter
    factory: sessionmaker
    bus: LocalBus
    routing: RoutingState
    rollout_id: int
    extra: dict[str, Any] = field(default_factory=dict)

    def client(self, **kw) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0, **kw)

    def direct(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.baseline_url + "/v1", api_key="unused", max_retries=0)

    def spans(self, cohort: str | None = None) -> list:
        found = [s for s in self.exporter.get_finished_spans() if A.COHORT in (s.attributes or {})]
        return [s for s in found if cohort is None or s.attributes[A.COHORT] == cohort]

    def pair_spans(self) -> list:
        return [s for s in self.exporter.get_finished_spans() if s.name == A.PAIR_SPAN_NAME]

    def mirrors_idle(self) -> bool:
        """Whether no mirror or control call is queued or running: what was sent arrived."""
        return self.extra["app"].api.state.gateway.mirror.pending == 0


@contextmanager
def gateway_stack(
    tmp_path,
    *,
    baseline: SimProfile | None = None,
    baseline_app: Any = None,
    candidate: SimProfile | None = None,
    candidate_app: Any = None,
    candidate_down: bool = False,
    mode: RolloutMode = RolloutMode.SHADOW,
    sample_rate: float = 1.0,
    start: bool = True,
    auth: dict[str, str] | None = None,
    require_token: str | None = None,
    health: RouteHealth | None = None,
    policy: dict[str, Any] | None = None,
    **settings_overrides: Any,
) -> Iterator[Stack]:
    defaults: dict[str, Any] = {
        "control_rate": 0.0,
        "state_poll_interval_s": 0.2,
        "mirror_deadline_s": 2.0,
        "upstream_timeout_s": 10.0,
        "route_secrets_dir": tmp_path / "secrets",
        "upstream_transport": _transport[0],
    }
    settings = Settings(
        home=tmp_path,
        database_url=f"sqlite:///{tmp_path}/gw.db",
        **{**defaults, **settings_overrides},
    )
    from gate.db import migrate

    migrate.upgrade(settings.resolved_database_url())
    engine = make_engine(settings.resolved_database_url())
    factory = sessionmaker(engine, expire_on_commit=False)
    base_log, cand_log = SimLog(), SimLog()
    with ExitStack() as stack:
        guard = (lambda app: bearer_only(require_token, app)) if require_token else (lambda a: a)
        base_app = baseline_app or create_sim_app(baseline or SimProfile(), base_log)
        base_url = stack.enter_context(serving(guard(base_app)))
        if candidate_down:
            cand_url = f"http://127.0.0.1:{closed_port()}"
        else:
            profile = candidate or SimProfile(spec_tokens=4, acceptance=0.7)
            cand_app = candidate_app or create_sim_app(profile, cand_log)
            cand_url = stack.enter_context(serving(guard(cand_app)))
        with factory() as session, session.begin():
            for name, url, role in (
                ("base", base_url, RouteRole.BASELINE),
                ("spec", cand_url, RouteRole.CANDIDATE),
            ):
                service.create_route(
                    session,
                    spec=RouteIn(
                        name=name, base_url=url + "/v1", model="sim", role=role, auth=auth
                    ),
                    actor="test",
                )
            rollout = service.create_rollout(
                session,
                spec=RolloutIn(
                    name="r1",
                    alias=ALIAS,
                    baseline_route="base",
                    candidate_route="spec",
                    mode=mode,
                    sample_rate=sample_rate,
                    policy=policy or {"stages": [100]},
                ),
                actor="test",
            )
            if start:
                service.transition(
                    session, rollout_id=rollout.id, action=Action.START, actor="test", reason="test"
                )
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        bus = LocalBus()
        routing = RoutingState(
            db_loader(factory, secrets_dir=settings.route_secrets_dir),
            poll_interval_s=settings.state_poll_interval_s,
            stale_after_s=settings.state_stale_after_s,
            subscriber=bus,
        )
        app = create_gateway_app(settings, routing=routing, tracer_provider=provider, health=health)
        url = stack.enter_context(serving(app))
        yield Stack(
            url,
            base_url,
            base_log,
            cand_log,
            exporter,
            factory,
            bus,
            routing,
            rollout.id,
            extra={"app": app},
        )
    engine.dispose()


def held(app: Any, release: threading.Event, arrived: list[int]) -> Any:
    """Wrap an ASGI app so that each chat request waits for `release` before it is served
    (`arrived` counts those that came). A test that needs a call in flight holds it so,
    never by a slow answer that a loaded host can outlast. Set `release` in a `finally`:
    a held call blocks the server's shutdown."""

    async def gated(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            arrived.append(1)
            await asyncio.to_thread(release.wait)
        await app(scope, receive, send)

    return gated


def bearer_only(token: str, app: Any) -> Any:
    """Wrap an ASGI app so that it answers 401 without `Authorization: Bearer <token>`."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b'{"error": "unauthorized"}'})
            return
        await app(scope, receive, send)

    return guarded


@pytest.fixture
def stack(tmp_path) -> Iterator[Stack]:
    with gateway_stack(tmp_path) as running:
        yield running
