"""Retention: content goes first, raw spans later, generations' numbers stay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from collectors.retention import purge
from collectors.store import SpanStore
from gate.db import migrate
from gate.db.engine import make_engine
from gate.db.models import EngineSample, Generation, RequestRecord, SpanRecord
from gate.settings import load_settings
from gate.telemetry import attributes as a
from tests.collectors.factory import START, Ids, gateway_spans, make_rollout


def check_purge(engine: Engine, ids: Ids) -> None:
    store = SpanStore(engine, pair_deadline_s=300)
    store.write(gateway_spans(ids))
    # A span kept raw (one that failed to normalise) still carries its own content.
    store.write([gateway_spans(ids)[1]], normalise_rows=False)
    settings = load_settings(
        retention_content_days=7, retention_spans_days=30, retention_batch_rows=2
    )
    fresh = purge(engine, settings, now=START + timedelta(days=3))
    assert fresh.spans_deleted == fresh.generations_scrubbed == fresh.spans_scrubbed == 0

    content = purge(engine, settings, now=START + timedelta(days=8))
    assert (content.generations_scrubbed, content.requests_scrubbed) == (2, 1)
    # Normalised spans never stored their content twice: only the raw span is scrubbed.
    assert content.spans_scrubbed == 1 and content.spans_deleted == 0
    with Session(engine) as session:
        generation = session.scalars(select(Generation)).first()
        assert generation.prompt is None and generation.output is None
        assert generation.output_extra is None and generation.content_purged_at is not None
        assert generation.ttft_s is not None  # the numbers the gate reads are kept
        assert session.scalars(select(RequestRecord)).one().body is None
        for span in session.scalars(select(SpanRecord)):
            assert not {a.PROMPT, a.OUTPUT, a.REQUEST_BODY} & set(span.attributes)
            assert span.attributes  # the rest of the span stays
    assert purge(engine, settings, now=START + timedelta(days=8)).generations_scrubbed == 0

    old = purge(engine, settings, now=START + timedelta(days=31))
    assert old.spans_deleted == 5
    with Session(engine) as session:
        assert session.scalars(select(SpanRecord)).first() is None
        assert len(session.scalars(select(Generation)).all()) == 2


@pytest.mark.postgres
def test_purge_on_postgres(pg_engine, pg_ids):
    check_purge(pg_engine, pg_ids)


def test_purge_on_sqlite(sqlite_engine, sqlite_ids):
    check_purge(sqlite_engine, sqlite_ids)


def check_samples_age_out(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        route = make_rollout(session).baseline_route
        session.add_all(
            EngineSample(route_id=route, metric="requests_running", value=1.0,
                         scraped_at=START + timedelta(days=day))
            for day in range(5)
        )  # fmt: skip
    settings = load_settings(retention_samples_days=2, retention_batch_rows=2)
    assert purge(engine, settings, now=START + timedelta(days=4)).samples_deleted == 2
    with Session(engine) as session:
        kept = session.scalars(select(EngineSample.scraped_at)).all()
    assert sorted(kept) == [START + timedelta(days=day) for day in (2, 3, 4)]


@pytest.mark.postgres
def test_samples_age_out_on_postgres(empty_pg_url):
    migrate.upgrade(empty_pg_url)  # a database of its own: the count is of every sample
    engine = make_engine(empty_pg_url)
    try:
        check_samples_age_out(engine)
    finally:
        engine.dispose()


def test_samples_age_out_on_sqlite(sqlite_engine):
    check_samples_age_out(sqlite_engine)
