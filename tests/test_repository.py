"""The repository keeps its promises: CI runs the README's command, lint and types clean."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    fresh = text.split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", fresh)


def test_readme_opens_with_the_main_job_then_the_tests():
    main_job, tests = readme_commands()
    assert "specgate" in main_job and "pytest" in tests


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert readme_commands()[1] in ci


def tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed in this environment; install '.[dev]'")
    return found


@pytest.mark.parametrize(
    "args",
    [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_static_checks_are_clean(args):
    result = subprocess.run(
        [tool(args[0]), *args[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
