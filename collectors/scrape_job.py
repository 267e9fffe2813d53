"""Periodic task: scrape every route's `/metrics` and store `engine_samples` rows."""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from collectors import scraper
from gate.db.base import utcnow
from gate.db.engine import transaction
from gate.db.models import EngineSample, Route
from gate.routing.credentials import DEFAULT_SECRETS_DIR, route_headers

log = logging.getLogger(__name__)


def scrape_routes(
    factory: sessionmaker[Session],
    client: httpx.Client,
    *,
    now: datetime | None = None,
    secrets_dir: Path = DEFAULT_SECRETS_DIR,
) -> dict[str, int]:
    """Scrape each route with a `metrics_url`; return rows written per route name."""
    now = now or utcnow()
    with factory() as session:
        routes = [
            (route.id, route.name, route.metrics_url, route.auth)
            for route in session.scalars(select(Route).where(Route.metrics_url.is_not(None)))
            if route.metrics_url
        ]
    written: dict[str, int] = {}
    for route_id, name, url, auth in routes:
        snapshot = _scrape(client, name, url, route_headers(name, auth, secrets_dir))
        if snapshot is None:
            continue
        with transaction(factory) as session:
            written[name] = store_scrape(session, route_id, snapshot, now)
        log.info("collector.scraped route=%s samples=%d", name, written[name])
    return written


def store_scrape(session: Session, route_id: int, current: scraper.Snapshot, now: datetime) -> int:
    """Store one scrape's values, with window values against the route's previous scrape."""
    values = scraper.window_samples(previous_snapshot(session, route_id), current)
    session.add_all(
        EngineSample(
            route_id=route_id, metric=name, labels=dict(labels), value=value, scraped_at=now
        )
        for (name, labels), value in values.items()
    )
    return len(values)


def previous_snapshot(session: Session, route_id: int) -> scraper.Snapshot | None:
    """Return the per-series cumulative counters and creation times of the route's latest
    stored scrape, if any."""
    counters = list(scraper.SERIES_COUNTERS)
    latest = session.scalar(
        select(func.max(EngineSample.scraped_at)).where(
            EngineSample.route_id == route_id, EngineSample.metric.in_(counters)
        )
    )
    if latest is None:
        return None
    rows = session.execute(
        select(EngineSample.metric, EngineSample.labels, EngineSample.value).where(
            EngineSample.route_id == route_id,
            EngineSample.scraped_at == latest,
            EngineSample.metric.in_([*counters, *scraper.CREATED_METRICS]),
        )
    )
    snapshot = scraper.Snapshot()
    for metric, labels, value in rows:
        key_labels = tuple(sorted(labels.items()))
        if metric in scraper.CREATED_METRICS:
            snapshot.created[(metric.removesuffix(scraper.CREATED), key_labels)] = value
        else:
            snapshot.series[(metric.removesuffix(scraper.SERIES), key_labels)] = value
    return snapshot


def _scrape(
    client: httpx.Client, name: str, url: str, headers: dict[str, str]
) -> scraper.Snapshot | None:
    try:
        response = client.get(url, headers=headers)
        response.raise_for_status()
        return scraper.parse(response.text)
    except (httpx.HTTPError, ValueError) as exc:
        log.warning("collector.scrape_failed route=%s url=%s error=%r", name, url, str(exc))
        return None
