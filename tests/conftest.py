"""Shared fixtures: real Postgres and Redis (required when CI=true), migrated SQLite.

Postgres: `SPECGATE_TEST_DATABASE_URL` names a server and a maintenance database; each test
run creates one throwaway database there, builds it with the Alembic migrations and drops it
at the end. Redis: `SPECGATE_TEST_REDIS_URL` (default db 15 on the local server), flushed
after each test that uses it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from gate.db import migrate
from gate.db.engine import make_engine, normalise_url
from gate.db.models import Base

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS = "redis://127.0.0.1:6379/15"
IN_CI = os.environ.get("CI", "").lower() == "true"


def service_unavailable(reason: str) -> None:
    """Skip locally; fail in CI, where Postgres and Redis are required."""
    if IN_CI:
        pytest.fail(f"{reason} (Postgres and Redis are required when CI=true)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    return normalise_url(os.environ.get("SPECGATE_TEST_DATABASE_URL", DEFAULT_PG))


@pytest.fixture(scope="session")
def pg_server(pg_admin_url: str) -> Iterator[Engine]:
    """An AUTOCOMMIT engine on the maintenance database, for CREATE/DROP DATABASE."""
    admin = create_engine(
        pg_admin_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3}
    )
    try:
        with admin.connect() as connection:
            connection.execute(text("SELECT 1"))
    except OperationalError as exc:
        admin.dispose()
        service_unavailable(f"Postgres not reachable at {make_url(pg_admin_url)!r}: {exc.orig}")
    yield admin
    admin.dispose()


def create_database(admin: Engine, prefix: str = "specgate_test") -> str:
    """Create an empty throwaway database and return its URL."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    return make_url(admin.url).set(database=name).render_as_string(hide_password=False)


def drop_database(admin: Engine, url: str) -> None:
    name = make_url(url).database
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def pg_url(pg_server: Engine) -> Iterator[str]:
    """A throwaway database for this run, built by running the migrations."""
    url = create_database(pg_server)
    migrate.upgrade(url)
    yield url
    drop_database(pg_server, url)


@pytest.fixture
def empty_pg_url(pg_server: Engine) -> Iterator[str]:
    """A fresh database with no schema, for migration tests."""
    url = create_database(pg_server, prefix="specgate_mig")
    yield url
    drop_database(pg_server, url)


@pytest.fixture
def fresh_pg_engine(empty_pg_url: str) -> Iterator[Engine]:
    """An engine on a fresh database of its own, built by running the migrations (for
    tests that change the schema, such as partitioning a table)."""
    migrate.upgrade(empty_pg_url)
    engine = make_engine(empty_pg_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def pg_engine(pg_url: str) -> Iterator[Engine]:
    engine = make_engine(pg_url)
    yield engine
    engine.dispose()


@pytest.fixture
def pg_session(pg_engine: Engine) -> Iterator[Session]:
    """A session inside a transaction that is rolled back after the test."""
    connection = pg_engine.connect()
    outer = connection.begin()
    session = Session(
        bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False
    )
    try:
        yield session
    finally:
        session.close()
        outer.rollback()
        connection.close()


@pytest.fixture
def pg_committing(pg_engine: Engine) -> Iterator[sessionmaker[Session]]:
    """A committing session factory, for tests where other processes must see the rows.

    Every table is truncated afterwards.
    """
    yield sessionmaker(pg_engine, expire_on_commit=False)
    tables = ", ".join(f'"{table.name}"' for table in Base.metadata.sorted_tables)
    with pg_engine.begin() as connection:
        connection.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A reachable Redis database, flushed after the test."""
    url = os.environ.get("SPECGATE_TEST_REDIS_URL", DEFAULT_REDIS)
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        client.close()
        service_unavailable(f"Redis not reachable at {url}: {exc}")
    yield url
    client.flushdb()
    client.close()


@pytest.fixture
def sqlite_url(tmp_path: object) -> str:
    """A migrated SQLite file in a temporary folder (the embedded default)."""
    url = f"sqlite:///{tmp_path}/specgate.db"
    migrate.upgrade(url)
    return url


@pytest.fixture
def sqlite_session(sqlite_url: str) -> Iterator[Session]:
    engine = make_engine(sqlite_url)
    with Session(engine, expire_on_commit=False) as session:
        yield session
    engine.dispose()


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Engines started by tests cache their re-encoded weights in the run's own folder."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECGATE_MODEL_CACHE", str(tmp_path_factory.mktemp("models")))
        yield
