"""`specgate db`: schema migrations."""

from __future__ import annotations

from typing import Annotated

import typer

from gate.cli.common import DatabaseOption, settings_with
from gate.db import migrate

app = typer.Typer(help="Create and migrate the database schema.", no_args_is_help=True)


@app.command()
def upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    database_url: DatabaseOption = None,
) -> None:
    """Migrate the database up to REVISION (default: the newest)."""
    url = settings_with(database_url).resolved_database_url()
    migrate.upgrade(url, revision)
    typer.echo(f"database {migrate.describe(url)} is at {migrate.current_revision(url)}")


@app.command()
def downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision ('base' drops it all).")] = "-1",
    database_url: DatabaseOption = None,
) -> None:
    """Migrate the database down to REVISION (default: one step)."""
    url = settings_with(database_url).resolved_database_url()
    migrate.downgrade(url, revision)
    at = migrate.current_revision(url) or "base (empty)"
    typer.echo(f"database {migrate.describe(url)} is at {at}")


@app.command()
def current(database_url: DatabaseOption = None) -> None:
    """Print the revision the database is at and the newest one available."""
    url = settings_with(database_url).resolved_database_url()
    at = migrate.current_revision(url) or "none (run `specgate db upgrade`)"
    typer.echo(f"database {migrate.describe(url)}: at {at}, newest {migrate.head_revision()}")
