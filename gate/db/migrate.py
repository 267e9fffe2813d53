"""Run the Alembic migrations shipped with the package, against any database URL."""

from __future__ import annotations

from importlib import resources

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from gate.db.engine import check_connection, make_engine, mask_url, normalise_url
from gate.errors import SchemaMissing


def alembic_config(url: str) -> Config:
    """Return an Alembic config for the packaged `migrations` folder and `url`."""
    config = Config()
    config.set_main_option("script_location", str(resources.files("migrations")))
    # ConfigParser interpolation would mangle `%` in URL-encoded passwords.
    config.set_main_option("sqlalchemy.url", normalise_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` up to `revision`."""
    check_connection(make_engine(url))
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "-1") -> None:
    """Migrate the database at `url` down to `revision`."""
    check_connection(make_engine(url))
    command.downgrade(alembic_config(url), revision)


def current_revision(url: str) -> str | None:
    """Return the revision the database is at, or None when it was never migrated."""
    engine = make_engine(url)
    check_connection(engine)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def require_current(url: str) -> str:
    """Return the database's revision; raise `SchemaMissing` unless it is the newest."""
    revision, head = current_revision(url), head_revision()
    if revision is None:
        raise SchemaMissing(
            f"database {describe(url)} has no schema yet; run `specgate db upgrade`"
        )
    if revision != head:
        raise SchemaMissing(
            f"database {describe(url)} is at schema {revision}, this specgate needs {head};"
            " run `specgate db upgrade`"
        )
    return revision


def head_revision() -> str:
    """Return the newest revision shipped with this version of specgate."""
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    head = script.get_current_head()
    if head is None:
        raise RuntimeError("no migrations are packaged")
    return head


def describe(url: str) -> str:
    """Return the URL as safe to print (password masked)."""
    return mask_url(url)
