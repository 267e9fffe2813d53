"""Engine and session factories, with one-line errors for bad or unreachable databases."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.orm import Session, sessionmaker

from gate.errors import ConfigError, DatabaseUnavailable
from gate.settings import Settings

_PASSWORD_IN_URL = re.compile(r"(://[^:/@]*:)[^@]*@")


def mask_url(url: str) -> str:
    """Return the URL with any password replaced by `***`, even when it does not parse."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return _PASSWORD_IN_URL.sub(r"\1***@", url)


def normalise_url(url: str) -> str:
    """Use psycopg 3 for bare `postgresql://` URLs (SQLAlchemy would pick psycopg2)."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def make_engine(url: str, *, echo: bool = False) -> Engine:
    """Create an engine for `url`; raise `ConfigError` naming the masked URL if it is bad."""
    url = normalise_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(f"invalid database URL {mask_url(url)!r}") from None
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, echo=echo)
    try:
        return create_engine(url, echo=echo, pool_pre_ping=True, connect_args=_pg_args(parsed))
    except (ArgumentError, NoSuchModuleError) as exc:
        raise ConfigError(f"invalid database URL {mask_url(url)!r}: {exc}") from None


def engine_from_settings(settings: Settings) -> Engine:
    """Create the engine a process uses, from its settings."""
    return make_engine(settings.resolved_database_url())


def _pg_args(parsed: object) -> dict[str, object]:
    return {"connect_timeout": 5} if str(parsed).startswith("postgresql+psycopg") else {}


def _sqlite_engine(url: str, *, echo: bool) -> Engine:
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, echo=echo, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: object, _record: object) -> None:
        cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return engine


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
