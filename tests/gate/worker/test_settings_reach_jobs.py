"""The periodic jobs run with the process's one `Settings`: SPECGATE_SCRAPE_TIMEOUT_S bounds
the live scrape (it used to be read only by a dead function, the live path waiting 5 s)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route as Path

from gate.db.engine import make_engine, session_factory
from gate.db.models import EngineSample, Route
from gate.periodic import JobContext, jobs
from gate.settings import load_settings
from tests.collectors.factory import make_rollout
from tests.collectors.test_scraper import FIRST
from tests.servers import serving

# The engine answers /metrics after this long: past a short timeout, within a long one.
ANSWER_AFTER_S = 1.0


def slow_metrics() -> Starlette:
    async def metrics(_request: Request) -> PlainTextResponse:
        await asyncio.sleep(ANSWER_AFTER_S)
        return PlainTextResponse(FIRST)

    return Starlette(routes=[Path("/metrics", metrics)])


@pytest.mark.parametrize(("timeout_s", "stored"), [("0.2", False), ("10", True)])
def test_the_scrape_timeout_variable_bounds_the_periodic_scrape(
    monkeypatch, sqlite_url, tmp_path, timeout_s, stored
):
    monkeypatch.setenv("SPECGATE_SCRAPE_TIMEOUT_S", timeout_s)
    settings = load_settings(database_url=sqlite_url, home=tmp_path)
    sessions = session_factory(make_engine(sqlite_url))
    with serving(slow_metrics()) as url:
        with sessions() as session, session.begin():
            ids = make_rollout(session)
            session.get(Route, ids.candidate_route).metrics_url = f"{url}/metrics"
        scrape = next(
            j for j in jobs(JobContext(settings, sessions, None, [].extend)) if j.name == "scrape"
        )
        written = scrape.run()
    with sessions() as session:
        rows = session.scalar(select(func.count()).select_from(EngineSample))
    assert (written > 0) is stored and (rows > 0) is stored
