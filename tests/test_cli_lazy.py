"""`specgate --help` loads only what it needs; every listed command still loads and runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gate.cli import COMMANDS, load_command

HEAVY = ("scipy", "matplotlib", "fastapi", "sqlalchemy")


def test_help_imports_none_of_the_heavy_libraries(tmp_path):
    code = (
        "import json, sys\n"
        "sys.argv = ['specgate', '--help']\n"
        "from gate.cli import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert result.returncode == 0, result.stderr
    *help_lines, loaded = result.stdout.strip().splitlines()
    assert json.loads(loaded) == []
    assert "rollout" in "\n".join(help_lines) and "Commands" in "\n".join(help_lines)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_listed_summary_is_the_commands_own(name):
    command = load_command(name)
    assert command.name == name
    assert (command.help or "").split("\n\n")[0].strip() == COMMANDS[name].help
