"""The command line as a user meets it on a fresh machine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gate.cli.pending import NOT_BUILT


def specgate(*args, cwd, env=None):
    return subprocess.run(
        [sys.executable, "-m", "gate", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})},
        timeout=120,
    )


@pytest.fixture
def fresh_dir(tmp_path, monkeypatch):
    for name in ("SPECGATE_DATABASE_URL", "SPECGATE_HOME", "SPECGATE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_help_lists_every_command_group(fresh_dir):
    out = specgate("--help", cwd=fresh_dir).stdout
    for name in ["db", "status", *NOT_BUILT]:
        assert f" {name} " in out, name


@pytest.mark.parametrize("name", sorted(NOT_BUILT))
def test_unbuilt_commands_say_so_and_fail(fresh_dir, name):
    result = specgate(name, "--anything", cwd=fresh_dir)
    assert result.returncode == 2
    assert "not built yet" in result.stderr


def test_the_readme_main_command_on_a_fresh_directory(fresh_dir):
    before = specgate("status", cwd=fresh_dir)
    assert before.returncode == 1 and "run `specgate db upgrade`" in before.stderr
    upgraded = specgate("db", "upgrade", cwd=fresh_dir)
    assert upgraded.returncode == 0, upgraded.stderr
    assert (fresh_dir / ".specgate" / "specgate.db").exists()
    status = specgate("status", cwd=fresh_dir)
    assert status.returncode == 0, status.stderr
    assert "rollouts by state: none yet" in status.stdout
    assert "The store is empty" in status.stdout


def test_db_downgrade_and_current(fresh_dir):
    specgate("db", "upgrade", cwd=fresh_dir)
    assert "at base (empty)" in specgate("db", "downgrade", "base", cwd=fresh_dir).stdout
    assert "at none" in specgate("db", "current", cwd=fresh_dir).stdout
