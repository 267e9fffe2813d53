"""The command line as a user meets it on a fresh machine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gate.cli.exits import NO_SCHEMA


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
    # The command groups of the architecture's CLI.
    groups = [
        "demo",
        "serve",
        "collect",
        "worker",
        "engine",
        "db",
        "rollout",
        "routes",
        "keys",
        "gate",
        "pairs",
        "report",
        "status",
    ]
    for name in groups:
        assert f" {name} " in out, name


def test_an_unknown_command_is_a_usage_error(fresh_dir):
    result = specgate("nosuch", cwd=fresh_dir)
    assert result.returncode == 2 and "No such command" in result.stderr


def test_the_readme_main_command_on_a_fresh_directory(fresh_dir):
    before = specgate("status", cwd=fresh_dir)
    assert before.returncode == NO_SCHEMA and "run `specgate db upgrade`" in before.stderr
    upgraded = specgate("db", "upgrade", cwd=fresh_dir)
    assert upgraded.returncode == 0, upgraded.stderr
    assert (fresh_dir / ".specgate" / "specgate.db").exists()
    status = specgate("status", cwd=fresh_dir)
    assert status.returncode == 0, status.stderr
    assert "rollouts by state: none yet" in status.stdout
    assert "The store is empty" in status.stdout
    assert "sandbox  ok: bubblewrap" in status.stdout


def test_status_says_loudly_when_code_tests_cannot_run(fresh_dir):
    specgate("db", "upgrade", cwd=fresh_dir)
    env = {"SPECGATE_SANDBOX_BWRAP": str(fresh_dir / "no-bwrap")}
    status = specgate("status", cwd=fresh_dir, env=env)
    assert status.returncode == 0, status.stderr
    assert "sandbox  UNAVAILABLE  code tests are not run: bubblewrap not found" in status.stdout


def test_db_downgrade_and_current(fresh_dir):
    specgate("db", "upgrade", cwd=fresh_dir)
    assert "at base (empty)" in specgate("db", "downgrade", "base", cwd=fresh_dir).stdout
    assert "at none" in specgate("db", "current", cwd=fresh_dir).stdout
