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


def _every_command(command, path):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _every_command(sub, f"{path} {name}")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_help_paragraph_is_one_line_for_the_terminal_to_wrap(name):
    # Docstrings break at 100 columns; shown as written, help broke mid-sentence.
    for path, command in _every_command(load_command(name), name):
        texts = [command.help, *(getattr(p, "help", None) for p in command.params)]
        for text in filter(None, texts):
            paragraphs = text.split("\f")[0].split("\n\n")
            assert all("\n" not in p for p in paragraphs), (path, text)


WIDE = {
    "": ("demo ", "print per-segment results and the verdict."),
    "rehearse": ("Replay a workload", "find where speculation stops paying."),
    "routes": ("launch ", "(needs the `vllm` extra unless --no-start)."),
    "gate": ("check ", "3 hold, 4 error."),
}


@pytest.mark.parametrize("command", list(WIDE))
def test_help_on_a_wide_terminal_keeps_each_sentence_on_one_line(command):
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "300"}
    args = [sys.executable, "-m", "gate", *command.split(), "--help"]
    result = subprocess.run(args, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    start, end = WIDE[command]
    shown = [line.strip(" │") for line in result.stdout.splitlines()]
    assert [line.endswith(end) for line in shown if line.startswith(start)] == [True]
