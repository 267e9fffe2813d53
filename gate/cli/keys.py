"""`specgate keys`: create, list and revoke scoped API keys."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy import select

from gate.cli.common import DatabaseOption, cli_actor, cli_transaction, settings_with
from gate.db.models import ApiKey
from gate.keys.service import create_key, revoke_key

app = typer.Typer(help="Create, list and revoke scoped API keys.", no_args_is_help=True)


@app.command()
def create(
    name: Annotated[str, typer.Option(help="A unique name; it is the audit actor.")],
    scopes: Annotated[str, typer.Option(help="Comma-separated: read, operate, admin.")] = "read",
    database_url: DatabaseOption = None,
) -> None:
    """Create a key and print it once; only its HMAC is stored."""
    settings = settings_with(database_url)
    with cli_transaction(settings) as db:
        row, token = create_key(
            db,
            name=name,
            scopes=scopes.split(","),
            secret_key=settings.secret_key.get_secret_value(),
            actor=cli_actor(),
        )
        granted = ",".join(row.scopes)
    typer.echo(f"key {name!r} ({granted}); shown once, store it now:\n{token}")


@app.command("list")
def list_keys(database_url: DatabaseOption = None) -> None:
    """List keys (never their secrets)."""
    with cli_transaction(settings_with(database_url)) as db:
        table = Table("name", "scopes", "created", "revoked")
        for row in db.scalars(select(ApiKey).order_by(ApiKey.id)):
            revoked = str(row.revoked_at) if row.revoked_at else ""
            table.add_row(row.name, ",".join(row.scopes), str(row.created_at), revoked)
    Console().print(table)


@app.command()
def revoke(
    name: Annotated[str, typer.Argument(help="The key's name.")],
    database_url: DatabaseOption = None,
) -> None:
    """Revoke a key; it stops working at once."""
    with cli_transaction(settings_with(database_url)) as db:
        revoke_key(db, name=name, actor=cli_actor())
    typer.echo(f"key {name!r} revoked")
