"""Engine and session factories, with one-line errors for bad or unreachable databases."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.orm import Session, sessionmaker

from gate.db import storage
from gate.db.storage import normalise_url as normalise_url
from gate.errors import ConfigError, DatabaseUnavailable
from gate.settings import Settings

_PASSWORD_IN_URL = re.compile(r"(://[^:/@]*:)[^@]*@")


def mask_url(url: str) -> str:
    """Return the URL with any password replaced by `***`, even when it does not parse."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return _PASSWORD_IN_URL.sub(r"\1***@", url)


def make_engine(url: str, *, echo: bool = False) -> Engine:
    """Create an engine for `url`, with its storage chosen once (`gate.db.storage`); raise
    `ConfigError` naming the masked URL if it is bad."""
    url = normalise_url(url)
    try:
        make_url(url)
    except ArgumentError:
        raise ConfigError(f"invalid database URL {mask_url(url)!r}") from None
    chosen = storage.for_url(url)
    try:
        return storage.register(chosen.create_engine(url, echo=echo), chosen)
    except (ArgumentError, NoSuchModuleError) as exc:
        raise ConfigError(f"invalid database URL {mask_url(url)!r}: {exc}") from None


def engine_from_settings(settings: Settings) -> Engine:
    """Create the engine a process uses, from its settings."""
    return make_engine(settings.resolved_database_url())


def check_connection(engine: Engine) -> None:
    """Open one connection; raise `DatabaseUnavailable` with a one-line reason if it fails."""
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except DBAPIError as exc:
        url = engine.url.render_as_string(hide_password=True)
        raise DatabaseUnavailable(f"cannot reach database {url}: {db_reason(exc)}") from None


def db_reason(exc: BaseException) -> str:
    """Return the first line of the driver's message (SQLAlchemy appends SQL and a link)."""
    orig = getattr(exc, "orig", None)
    lines = str(orig if orig is not None else exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Return the session factory for `engine` (objects stay usable after commit)."""
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """Open a session whose transaction commits on success and rolls back on error."""
    with factory() as session, session.begin():
        yield session
