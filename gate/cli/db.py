"""`specgate db`: schema migrations and time partitions."""

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


@app.command()
def partition(
    tables: Annotated[
        list[str] | None,
        typer.Argument(
            help="Tables to partition: spans, engine_samples (the default), pairs (once "
            "every gateway runs this version), generations and requests (once every "
            "collector does), evaluations (once every worker does; deploy/PRODUCTION.md)."
        ),
    ] = None,
    period: Annotated[str, typer.Option(help="One partition per hour, day or week.")] = "day",
    batch: Annotated[int, typer.Option(min=1, help="Rows copied per transaction.")] = 20_000,
    drop_old: Annotated[
        bool, typer.Option("--drop-old", help="Drop the unpartitioned tables a conversion kept.")
    ] = False,
    database_url: DatabaseOption = None,
) -> None:
    """Range-partition telemetry tables by time online (Postgres): copy in batches, swap.

    The old table stays as <table>_unpartitioned until you run this again with --drop-old.
    The periodic `partitions` job then creates partitions ahead, and retention drops them.
    """
    from gate.db import online_partition, partitions
    from gate.db.engine import make_engine
    from gate.db.storage import is_embedded

    url = settings_with(database_url).resolved_database_url()
    if is_embedded(url):
        raise typer.BadParameter("partitioning needs Postgres; SQLite stays unpartitioned")
    if period not in partitions.PERIODS:
        raise typer.BadParameter(f"--period is one of {', '.join(partitions.PERIODS)}")
    engine = make_engine(url)
    try:
        for table in tables or list(partitions.DEFAULT_TABLES):
            if table not in partitions.LAYOUTS:
                raise typer.BadParameter(
                    f"{table}: partitionable are {', '.join(partitions.LAYOUTS)}"
                )
            if drop_old:
                dropped = online_partition.drop_old(engine, table)
                typer.echo(f"{table}: {'dropped' if dropped else 'no'} {table}_unpartitioned")
                continue
            online_partition.convert(
                engine, table, period=partitions.PERIODS[period], batch=batch, echo=typer.echo
            )
    finally:
        engine.dispose()
