"""Helpers shared by CLI commands."""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from sqlalchemy.orm import Session

from gate.db import migrate
from gate.db.engine import engine_from_settings, session_factory, transaction
from gate.errors import InputMalformed, InputMissing
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


def read_input(path: Path, what: str) -> str:
    """Return an input file's text; a missing or unreadable one is `InputMissing`."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise InputMissing(f"cannot read {what} {path}: {reason}") from None


def read_yaml(path: Path, what: str) -> Any:
    """Return an input file's YAML; bad YAML is `InputMalformed`, naming the line."""
    try:
        return yaml.safe_load(read_input(path, what))
    except yaml.YAMLError as exc:
        raise InputMalformed(
            f"{what} {path} is not valid YAML: {' '.join(str(exc).split())}"
        ) from None


@contextmanager
def cli_transaction(settings: Settings) -> Iterator[Session]:
    """One command's `transaction` on the configured database, checked at the newest schema."""
    migrate.require_current(settings.resolved_database_url())
    db_engine = engine_from_settings(settings)
    try:
        with transaction(session_factory(db_engine)) as session:
            yield session
    finally:
        db_engine.dispose()
