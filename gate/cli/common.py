"""Helpers shared by CLI commands."""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from sqlalchemy.orm import Session, sessionmaker

from gate.db.engine import engine_from_settings, session_factory
from gate.routing.deployment import DeploymentId
from gate.routing.pubsub import Publisher, RedisPublisher
from gate.settings import Settings, load_settings

DatabaseOption = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="SQLAlchemy URL (default: SPECGATE_DATABASE_URL, else ./.specgate/specgate.db).",
        show_default=False,
    ),
]


def settings_with(database_url: str | None) -> Settings:
    """Build settings from the environment, with the CLI's database URL on top."""
    if database_url:
        return load_settings(database_url=database_url)
    return load_settings()


def cli_actor() -> str:
    """Return the audit actor for an operator at this terminal."""
    return f"cli:{getpass.getuser()}"


def publisher(settings: Settings, db: Session | sessionmaker[Session]) -> Publisher | None:
    """Publish routing changes on Redis when configured (gateways also poll the DB)."""
    if not settings.redis_url:
        return None
    # The identity is read on a session of its own: publishing runs inside `db`'s commit.
    sessions = sessionmaker(db.get_bind()) if isinstance(db, Session) else db
    return RedisPublisher(settings.redis_url, deployment=DeploymentId(sessions))


@contextmanager
def transaction(settings: Settings) -> Iterator[Session]:
    """One committed transaction against the configured database."""
    engine = engine_from_settings(settings)
    try:
        with session_factory(engine)() as session, session.begin():
            yield session
    finally:
        engine.dispose()
