"""`specgate pairs`: export recorded pairs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from gate.cli.common import DatabaseOption, cli_transaction, settings_with
from gate.pairs.export import pair_records
from gate.rollouts import service as rollouts

app = typer.Typer(help="Export recorded pairs.", no_args_is_help=True)


@app.command("export")
def export(
    rollout: Annotated[int, typer.Option("--rollout", help="Rollout id.")],
    stage: Annotated[int | None, typer.Option(help="Only this stage (default: all).")] = None,
    out: Annotated[Path | None, typer.Option(help="File to write (default: stdout).")] = None,
    with_requests: Annotated[
        bool,
        typer.Option(help="Add each pair's kept request (a workload for `specgate rehearse`)."),
    ] = False,
    database_url: DatabaseOption = None,
) -> None:
    """Write closed pairs as JSONL (the schema `specgate gate replay` reads)."""
    count = 0
    with cli_transaction(settings_with(database_url)) as db:
        rollouts.get_rollout(db, rollout_id=rollout)
        target = out.open("w") if out else sys.stdout
        try:
            for record in pair_records(
                db, rollout_id=rollout, stage=stage, with_requests=with_requests
            ):
                target.write(json.dumps(record) + "\n")
                count += 1
        finally:
            if out:
                target.close()
    if out:
        typer.echo(f"{count} pairs written to {out}")
