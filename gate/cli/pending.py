"""Commands the architecture names that are not built yet: they say so and exit 2."""

from __future__ import annotations

import sys
from collections.abc import Callable

import typer

# command -> (what it will do, the capability it arrives with)
NOT_BUILT: dict[str, tuple[str, str]] = {}


def register(app: typer.Typer) -> None:
    """Add a placeholder command for each capability not built yet."""
    for name, (summary, capability) in NOT_BUILT.items():
        app.command(
            name,
            help=f"(not built yet) {summary}",
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        )(_refuse(name, capability))


def _refuse(name: str, capability: str) -> Callable[[typer.Context], None]:
    def command(ctx: typer.Context) -> None:
        print(
            f"specgate {name}: not built yet; it arrives with the {capability} work.",
            file=sys.stderr,
        )
        sys.exit(2)

    return command
