"""Assemble the control API inside the gateway app."""

from __future__ import annotations

from fastapi import FastAPI

from gate.api import problems
from gate.api.deps import Services
from gate.api.limits import BodyLimit
from gate.api.routers import (
    browse,
    controllers,
    dashboard,
    misc,
    rehearsals,
    reports,
    rollouts,
    ui,
)
from gate.controllers import redact


def install_control_api(app: FastAPI, services: Services) -> None:
    """Add the control endpoints, their error rendering and their services to `app`."""
    app.state.services = services
    problems.install(app)
    redact.install()
    app.add_middleware(BodyLimit, max_bytes=services.settings.control_body_max_bytes)
    for module in (rollouts, rehearsals, controllers, browse, misc, dashboard, reports, ui):
        app.include_router(module.router, responses=problems.RESPONSES)
