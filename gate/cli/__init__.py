"""The `specgate` command line."""

from __future__ import annotations

import typer

from gate import logs
from gate.cli import (
    advise,
    collect,
    db,
    demo,
    engine,
    gatecheck,
    gatecmd,
    keys,
    rehearse,
    report,
    rollout,
    serve,
    status,
    worker,
)
from gate.cli.exits import run_cli

app = typer.Typer(
    name="specgate",
    help="Rollout gate and observability for LLM speculative decoding.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _logging() -> None:
    # One logging setup for every command (SPECGATE_LOG_LEVEL, SPECGATE_LOG_FORMAT).
    logs.configure()


app.add_typer(db.app, name="db")
app.add_typer(keys.app, name="keys")
app.add_typer(rollout.app, name="rollout")
app.add_typer(rollout.routes_app, name="routes")
app.add_typer(
    worker.app, name="worker", help="Run Celery evaluator workers (needs SPECGATE_REDIS_URL)."
)
app.command("demo")(demo.demo)
app.command("status")(status.status)
app.command("serve")(serve.serve)
app.command("engine")(engine.engine)
app.command("collect")(collect.collect)
app.command("rehearse")(rehearse.rehearse_command)
gatecmd.app.command("check")(gatecheck.check)
gatecmd.app.command("advise")(advise.advise_command)
app.add_typer(gatecmd.app, name="gate")
app.add_typer(gatecheck.pairs_app, name="pairs")
app.add_typer(report.app, name="report", help="Write regression reports.")


def main() -> None:
    """Run the CLI; every error is one line on stderr with its exit code (gate.cli.exits)."""
    run_cli(app)
