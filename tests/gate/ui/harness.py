"""The control API with the dashboard and report routers, and one key per scope."""

from __future__ import annotations

from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from gate.api.deps import Services
from gate.api.routers import dashboard, reports, ui
from gate.keys.service import create_key
from gate.routing.pubsub import LocalBus
from gate.settings import Settings
from tests.servers import control_api

SECRET = "ui-secret"


def control_app(pg_url: str, sessions: sessionmaker[Session]) -> FastAPI:
    """Build the control API; add this work's routers unless app.py already includes them."""
    settings = Settings(database_url=pg_url, secret_key=SECRET, redis_url=None)
    app = control_api(Services(settings=settings, sessions=sessions, publisher=LocalBus()))
    present = {getattr(route, "path", None) for route in app.routes}
    for module in (ui, dashboard, reports):
        if not any(getattr(r, "path", None) in present for r in module.router.routes):
            app.include_router(module.router)
    return app


def make_keys(sessions: sessionmaker[Session]) -> dict[str, str]:
    """Create one committed key per scope; return the tokens by scope."""
    tokens = {}
    with sessions() as db, db.begin():
        for scope in ("read", "operate", "admin"):
            _, tokens[scope] = create_key(
                db, name=f"ui-{scope}", scopes=[scope], secret_key=SECRET, actor="test"
            )
    return tokens


def bearer(token: str) -> dict[str, str]:
    """Return the Authorization header for a token."""
    return {"Authorization": f"Bearer {token}"}
