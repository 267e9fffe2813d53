"""Scraping a real engine exposition over HTTP across a restart: windows stay consistent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route as Path

from collectors.scrape_job import scrape_routes
from gate.db.models import EngineSample, Route
from tests.collectors.factory import make_rollout
from tests.servers import serving

pytestmark = pytest.mark.postgres

START = datetime(2026, 11, 20, tzinfo=UTC)
# vLLM's TTFT buckets, up to 1 s.
_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0)
BEFORE = [0.05, 0.08, 0.10]  # three requests, 0.23 s of TTFT in all


def engine_exposition(ttfts: list[float], *, created: bool) -> str:
    """Return the `/metrics` text of an engine started afresh that answered with `ttfts`;
    without `_created` series, as engines in prometheus_client's multiprocess mode expose."""
    registry = CollectorRegistry()  # a new process: every series starts from zero
    histogram = Histogram(
        "vllm:time_to_first_token_seconds", "Time to first token.",
        ["engine", "model_name"], registry=registry, buckets=_BUCKETS,
    )  # fmt: skip
    for seconds in ttfts:
        histogram.labels("0", "llama").observe(seconds)
    text = generate_latest(registry).decode()
    if created:
        return text
    return "".join(line for line in text.splitlines(keepends=True) if "_created" not in line)


def engine(pages: list[str]) -> Starlette:
    """An engine's `/metrics` answering each scrape with the next page."""
    served = iter(pages)

    async def metrics(_request: Request) -> PlainTextResponse:
        return PlainTextResponse(next(served))

    return Starlette(routes=[Path("/metrics", metrics)])


def mean_ttft_after(committing: sessionmaker[Session], pages: list[str]) -> float | None:
    """Scrape the pages 15 s apart; return the last window's mean TTFT."""
    with committing() as session, session.begin():
        route_id = make_rollout(session).candidate_route
    with serving(engine(pages)) as base_url:
        with committing() as session, session.begin():
            session.get_one(Route, route_id).metrics_url = f"{base_url}/metrics"
        with httpx.Client(timeout=5) as client:
            for turn in range(len(pages)):
                scrape_routes(committing, client, now=START + timedelta(seconds=15 * turn))
    with committing() as session:
        return session.scalar(
            select(EngineSample.value).where(
                EngineSample.metric == "ttft_seconds_mean_window",
                EngineSample.scraped_at == START + timedelta(seconds=15 * (len(pages) - 1)),
            )
        )


@pytest.mark.parametrize("created", [True, False], ids=["with-created", "without-created"])
def test_a_restart_fewer_requests_but_more_ttft_resets_the_whole_histogram(
    pg_committing: sessionmaker[Session], created: bool
) -> None:
    # After the restart: two requests, 0.35 s in all. `_count` went down (3 to 2) while
    # `_sum` went up (0.23 to 0.35): both began again, and the window's mean is 0.35 / 2.
    pages = [engine_exposition(BEFORE, created=created)]
    pages.append(engine_exposition([0.15, 0.20], created=created))
    assert mean_ttft_after(pg_committing, pages) == pytest.approx(0.35 / 2)


def test_a_changed_created_timestamp_is_a_restart_even_when_every_value_rose(
    pg_committing: sessionmaker[Session],
) -> None:
    after = [0.10, 0.10, 0.12, 0.13, 0.15]  # five requests since the restart, 0.60 s
    pages = [engine_exposition(BEFORE, created=True), engine_exposition(after, created=True)]
    created = [line for line in "".join(pages).splitlines() if "_created{" in line]
    assert len(created) == len(set(created)) == 2  # the restart changed the creation time
    assert mean_ttft_after(pg_committing, pages) == pytest.approx(0.60 / 5)
