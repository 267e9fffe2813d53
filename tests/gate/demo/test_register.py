"""The demo records its routes as it starts their engines."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from gate.db.engine import make_engine, session_factory
from gate.db.enums import RouteRole
from gate.db.models import Route
from gate.demo.run import DemoOptions, _register


@dataclass(frozen=True)
class Started:
    base_url: str


def test_the_candidate_route_records_the_draft_length_its_engine_was_started_with(sqlite_url):
    sessions = session_factory(make_engine(sqlite_url))
    engines = {
        RouteRole.BASELINE: Started("http://127.0.0.1:1/v1"),
        RouteRole.CANDIDATE: Started("http://127.0.0.1:2/v1"),
    }
    options = DemoOptions(num_speculative_tokens=3)
    _register(sessions, engines, options, {}, None)
    with sessions() as db:
        routes = {r.role: r for r in db.scalars(select(Route))}
    assert routes[RouteRole.CANDIDATE].spec_tokens == 3
    assert routes[RouteRole.BASELINE].spec_tokens is None
