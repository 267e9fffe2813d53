"""Reachability checks of the database and Redis, for readiness and `specgate status`, and
the gateway's liveness body."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from sqlalchemy import Engine

from gate.db.engine import check_connection, mask_url
from gate.errors import DatabaseUnavailable
from gate.routing.health import RouteHealth
from gate.routing.sync import RoutingState


@dataclass(frozen=True)
class ComponentHealth:
    name: str
    ok: bool
    detail: str


def database_health(engine: Engine) -> ComponentHealth:
    """Check that the database answers a query."""
    try:
        check_connection(engine)
    except DatabaseUnavailable as exc:
        return ComponentHealth("database", False, exc.message)
    return ComponentHealth("database", True, engine.url.render_as_string(hide_password=True))


def redis_health(url: str | None, *, timeout_s: float = 1.0) -> ComponentHealth:
    """Check that Redis answers PING; no URL means the embedded in-process mode."""
    if not url:
        return ComponentHealth("redis", True, "not configured (in-process mode)")
    client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        client.ping()
    except redis.RedisError as exc:
        return ComponentHealth("redis", False, f"cannot reach redis {mask_url(url)}: {exc}")
    finally:
        client.close()
    return ComponentHealth("redis", True, mask_url(url))


def gateway_liveness(routing: RoutingState, routes: RouteHealth | None) -> dict[str, object]:
    """Return a gateway's `/healthz` body: stale routing, pub/sub, and routes marked down."""
    return {
        "status": "ok",
        "routing_stale": routing.is_stale(),
        "pubsub_connected": routing.pubsub_connected,
        "routes_down": routes.detail() if routes is not None else {},
    }
