"""`specgate report weekly`: write the weekly regression report and store it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gate.cli.common import DatabaseOption, cli_transaction, settings_with
from gate.reports.jobs import last_complete_week
from gate.reports.model import Week
from gate.reports.weekly import build_weekly

app = typer.Typer(help="Write regression reports.", no_args_is_help=True)


@app.command()
def weekly(
    out: Annotated[Path, typer.Option("--out", help="Folder for report.html, report.md, PNGs.")],
    week: Annotated[
        str | None, typer.Option(help="ISO week, e.g. 2026-W47 (default: last complete week).")
    ] = None,
    database_url: DatabaseOption = None,
) -> None:
    """Write the weekly report (HTML, Markdown, PNG plots) and store it for the API."""
    target = Week.parse(week) if week else last_complete_week()
    with cli_transaction(settings_with(database_url)) as db:
        report = build_weekly(db, target, out_dir=out)
        report_id = report.report_id
    typer.echo(
        f"report {report_id} {target}: {len(report.regressions)} regression(s), "
        f"{len(report.improvements)} improvement(s), {len(report.kills)} kill(s)"
    )
    typer.echo(f"wrote {out / 'report.html'} and {out / 'report.md'}")
