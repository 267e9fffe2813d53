"""`specgate status`: what the store holds."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from gate.cli.common import DatabaseOption, settings_with
from gate.db import migrate
from gate.db.engine import make_engine, session_factory
from gate.health import redis_health
from gate.settings import Settings
from gate.status import store_status, unsandboxed_evaluations


def status(database_url: DatabaseOption = None) -> None:
    """Show the schema revision, rollouts by state and row counts of the store."""
    settings = settings_with(database_url)
    url = settings.resolved_database_url()
    revision = migrate.require_current(url)
    db_engine = make_engine(url)
    with session_factory(db_engine)() as session:
        summary = store_status(session, max_requeues=settings.pair_requeue_max)
        unsandboxed = unsandboxed_evaluations(session)
    db_engine.dispose()
    console = Console()
    console.print(f"store  {migrate.describe(url)}  (schema {revision})")
    broker = redis_health(settings.redis_url)
    console.print(f"redis  {broker.detail}" + ("" if broker.ok else "  [red]DOWN[/red]"))
    _print_sandbox(console, settings, unsandboxed)
    table = Table("table", "rows")
    for name, count in summary.counts.items():
        table.add_row(name, str(count))
    console.print(table)
    states = ", ".join(f"{state}: {n}" for state, n in sorted(summary.rollouts_by_state.items()))
    console.print(f"rollouts by state: {states or 'none yet'}")
    if summary.awaiting_evaluation:
        age = summary.oldest_awaiting_s or 0.0
        line = f"pairs awaiting evaluation: {summary.awaiting_evaluation}"
        if age > settings.pair_requeue_after_s:
            line += f" (oldest completed {age / 60:.0f} min ago: are evaluations running?)"
        if summary.requeues_exhausted:
            line += (
                f"; {summary.requeues_exhausted} given up after {settings.pair_requeue_max} tries"
            )
        console.print(line)
    if summary.empty:
        typer.echo("The store is empty: register routes and a rollout to start collecting.")


def _print_sandbox(console: Console, settings: Settings, unsandboxed: int) -> None:
    # Probed on this host: run `specgate status` where the workers run to judge theirs.
    from evaluators.jail import probe

    found = probe(settings.sandbox_bwrap, settings.sandbox_uid)
    if found.jail is not None:
        console.print(f"sandbox  ok: {found.detail}", markup=False, highlight=False)
    else:
        console.print(f"sandbox  [red]UNAVAILABLE[/red]  code tests are not run: {found.detail}")
    if unsandboxed:
        console.print(f"evaluations not evaluable (no sandbox): {unsandboxed}")
