"""Fixtures for the span pipeline: a committed rollout with its routes, on either database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from gate.db.engine import make_engine
from tests.collectors.factory import Ids, make_rollout


@pytest.fixture
def pg_ids(pg_committing: sessionmaker[Session]) -> Ids:
    """A running rollout and its two routes, committed (truncated after the test)."""
    with pg_committing() as session, session.begin():
        return make_rollout(session)


@pytest.fixture
def sqlite_engine(sqlite_url: str) -> Iterator[Engine]:
    engine = make_engine(sqlite_url)
    yield engine
    engine.dispose()


@pytest.fixture
def sqlite_ids(sqlite_engine: Engine) -> Ids:
    with Session(sqlite_engine) as session, session.begin():
        return make_rollout(session)
