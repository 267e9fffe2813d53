"""`specgate collect` is a typer command (the lead wires it into the CLI)."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from gate.cli.collect import collect


def test_collect_is_a_typer_command_with_host_port_and_token():
    app = typer.Typer()
    app.command("collect")(collect)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["collect", "--help"])
    assert result.exit_code == 0
    for option in ("--host", "--port", "--database-url", "--token"):
        assert option in result.output
