"""Operators' commands against a real store, and `specgate serve` as a process."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from gate.cli.exits import NO_SCHEMA
from tests.gate.api.test_processes import specgate_serve


def run(*args, cwd, check=True):
    result = subprocess.run(
        [sys.executable, "-m", "gate", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


@pytest.fixture
def store(tmp_path, monkeypatch):
    for name in ("SPECGATE_DATABASE_URL", "SPECGATE_HOME", "SPECGATE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    run("db", "upgrade", cwd=tmp_path)
    return tmp_path


def test_keys_routes_and_a_rollout_life_cycle(store):
    token = run("keys", "create", "--name", "oncall", "--scopes", "operate", cwd=store).stdout
    assert "shown once" in token and token.strip().splitlines()[-1].startswith("sg_")
    assert "oncall" in run("keys", "list", cwd=store).stdout
    for name, role in (("base", "baseline"), ("spec", "candidate")):
        run(
            "routes",
            "add",
            "--name",
            name,
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--role",
            role,
            cwd=store,
        )
    run(
        "rollout",
        "create",
        "--name",
        "r1",
        "--alias",
        "smol",
        "--baseline",
        "base",
        "--candidate",
        "spec",
        cwd=store,
    )
    assert "state=running" in run("rollout", "start", "1", cwd=store).stdout
    assert (
        "state=killed" in run("rollout", "kill", "1", "-r", "acceptance collapse", cwd=store).stdout
    )
    refused = run("rollout", "promote", "1", "-r", "ship", cwd=store, check=False)
    assert refused.returncode == 1 and "cannot promote a rollout that is killed" in refused.stderr
    assert "killed" in run("rollout", "list", cwd=store).stdout
    assert "revoked" in run("keys", "revoke", "oncall", cwd=store).stdout


def test_serve_runs_the_gateway_and_the_control_api(store):
    with specgate_serve(f"sqlite:///{store}/.specgate/specgate.db") as base:
        assert httpx.get(base + "/readyz").json()["ready"] is True
        assert httpx.get(base + "/v1/models").json() == {"object": "list", "data": []}
        assert httpx.get(base + "/v1/rollouts").status_code == 401
        assert "/v1/rollouts/{rollout_id}/kill" in httpx.get(base + "/openapi.json").json()["paths"]
        unknown = httpx.post(base + "/v1/chat/completions", json={"model": "x", "messages": []})
        assert unknown.status_code == 404 and "error" in unknown.json()


def test_serve_refuses_an_unmigrated_store(tmp_path):
    result = run(
        "serve", "--database-url", f"sqlite:///{tmp_path}/empty.db", cwd=tmp_path, check=False
    )
    assert result.returncode == NO_SCHEMA and "run `specgate db upgrade`" in result.stderr
