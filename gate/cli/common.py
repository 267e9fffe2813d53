"""Helpers shared by CLI commands."""

from __future__ import annotations

from typing import Annotated

import typer

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
