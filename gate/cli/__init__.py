"""The `specgate` command line.

Each command's module is imported only when that command runs (or shows its own help):
`specgate --help` lists them from the table below without loading SQLAlchemy, FastAPI,
scipy or matplotlib.
"""

from __future__ import annotations

import faulthandler
import inspect
import signal
import sys
from dataclasses import dataclass
from importlib import import_module
from typing import Any

import typer
from typer.core import TyperGroup

from gate import logs
from gate.cli.exits import run_cli


@dataclass(frozen=True)
class Lazy:
    """A command (a function) or group (a Typer) named `module:attribute`, and its help."""

    target: str
    help: str
    group: bool = False


# In the order `specgate --help` lists them; `help` is the first paragraph of each's own.
COMMANDS: dict[str, Lazy] = {
    "demo": Lazy(
        "gate.cli.demo:demo",
        "Run a plain and an n-gram speculative SmolLM2 engine, the gateway in shadow mode, "
        "the collectors, evaluators and the gate on SQLite; replay the built-in workload and "
        "print per-segment results and the verdict.",
    ),
    "status": Lazy(
        "gate.cli.status:status",
        "Show the schema revision, rollouts by state and row counts of the store.",
    ),
    "serve": Lazy(
        "gate.cli.serve:serve",
        "Run the OpenAI-compatible gateway (shadow mirror / canary with fallback).",
    ),
    "engine": Lazy(
        "gate.cli.engine:engine",
        "Serve SmolLM2 on llama.cpp or transformers (plain or n-gram speculative), or `sim`.",
    ),
    "rehearse": Lazy(
        "gate.cli.rehearse:rehearse_command",
        "Replay a workload against a baseline and one or more candidates at rising "
        "concurrency; find where speculation "
        "stops paying.",
    ),
    "collect": Lazy(
        "gate.cli.collect:collect",
        "Receive OTLP/HTTP spans on POST /v1/traces and write them to the database.",
    ),
    "db": Lazy("gate.cli.db:app", "Create and migrate the database schema.", group=True),
    "keys": Lazy("gate.cli.keys:app", "Create, list and revoke scoped API keys.", group=True),
    "rollout": Lazy("gate.cli.rollout:app", "Create, inspect and steer rollouts.", group=True),
    "routes": Lazy("gate.cli.routes:app", "Register, list and remove routes.", group=True),
    "worker": Lazy(
        "gate.cli.worker:app",
        "Run Celery evaluator workers (needs SPECGATE_REDIS_URL).",
        group=True,
    ),
    "gate": Lazy("gate.cli.gatecmd:app", "Replay and simulate the statistical gate.", group=True),
    "pairs": Lazy("gate.cli.pairs:app", "Export recorded pairs.", group=True),
    "report": Lazy("gate.cli.report:app", "Write regression reports.", group=True),
}


def sentences(text: str | None) -> str | None:
    """Return help text with each paragraph on one line, for the terminal to wrap."""
    if not text:
        return text
    # Docstrings break lines at 100 columns; left in, they break sentences on screen.
    shown, cut, hidden = inspect.cleandoc(text).partition("\f")
    paragraphs = [
        p if p.startswith("\b") else " ".join(line.strip() for line in p.splitlines())
        for p in shown.split("\n\n")
    ]
    return "\n\n".join(paragraphs) + cut + hidden


def unwrapped(command: Any) -> Any:
    """Return a click command with its help, its parameters' and its subcommands' unwrapped."""
    command.help = sentences(command.help)
    command.short_help = sentences(command.short_help)
    for param in command.params:
        if hasattr(param, "help"):  # options and Typer's arguments
            param.help = sentences(param.help)
    for sub in getattr(command, "commands", {}).values():
        unwrapped(sub)
    return command


def load_command(name: str) -> Any:
    """Import one command's module and return it as a click command."""
    lazy = COMMANDS[name]
    module, attribute = lazy.target.split(":")
    target = getattr(import_module(module), attribute)
    parent = typer.Typer(add_completion=False)
    if lazy.group:
        parent.add_typer(target, name=name, help=lazy.help)
    else:
        parent.command(name)(target)
    return unwrapped(typer.main.get_group(parent).commands[name])


class LazyGroup(TyperGroup):
    """The root group: commands load on first use; its own help lists them unloaded."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        """Return the eager commands, then the lazy ones in the table's order."""
        return [*super().list_commands(ctx), *COMMANDS]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """Return a command, importing its module unless only its summary is wanted."""
        if cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        if self._listing:
            return typer.core.TyperCommand(cmd_name, help=COMMANDS[cmd_name].help)
        return load_command(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """Write the help, listing commands from the table."""
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="specgate",
    help="Rollout gate and observability for LLM speculative decoding.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)


@app.callback()
def _logging() -> None:
    # One logging setup for every command (SPECGATE_LOG_LEVEL, SPECGATE_LOG_FORMAT).
    logs.configure()
    # `kill -USR1 PID` prints every thread's stack to stderr: how a stuck process is read.
    # The process's own stderr, not a caller's capture of sys.stderr (which has no fd).
    if sys.__stderr__ is not None:
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)


def main() -> None:
    """Run the CLI; every error is one line on stderr with its exit code (gate.cli.exits)."""
    run_cli(app)
