"""`specgate gate check` exit codes for pipelines, and `pairs export` into `gate replay`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from gate.db import migrate
from gate.db.engine import make_engine, session_factory
from gate.rollouts import service
from gate.rollouts.states import Action
from tests import factories
from tests.gate.verdicts.test_arms import armed
from tests.gate.verdicts.test_service import POLICY


def specgate(*args, url):
    return subprocess.run(
        [sys.executable, "-m", "gate", *args, "--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
    )


@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    migrate.upgrade(url)
    return url, session_factory(make_engine(url))


def rollout_with(sessions, *, start=True, **seed):
    with sessions() as db, db.begin():
        rollout = factories.rollout(db, name=f"r{len(seed)}{start}", policy=POLICY)
        if start:
            service.transition(
                db, rollout_id=rollout.id, action=Action.START, actor="t", reason="t"
            )
        if seed:
            factories.seed_pairs(db, rollout.id, **seed)
        return rollout.id


def test_exit_codes(store):
    url, sessions = store
    killed = rollout_with(sessions, count=600, candidate_pass=0.6)
    first = specgate("gate", "check", "--rollout", str(killed), url=url)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "KILL" in first.stdout and "task" in first.stdout
    assert specgate("gate", "check", "--rollout", str(killed), url=url).returncode == 1
    promoted = rollout_with(sessions, count=1500, tpot_ratio=0.6, seed=3)
    result = specgate("gate", "check", "--rollout", str(promoted), "--json", url=url)
    assert result.returncode == 0 and json.loads(result.stdout)["decision"] == "promote"
    pending = rollout_with(sessions, start=False)
    assert specgate("gate", "check", "--rollout", str(pending), url=url).returncode == 2
    waiting = rollout_with(sessions, count=100)
    shown = specgate("gate", "check", "--rollout", str(waiting), url=url)
    assert shown.returncode == 2 and "CONTINUE" in shown.stdout, shown.stderr  # no-data cells
    timed_out = specgate(
        "gate",
        "check",
        "--rollout",
        str(waiting),
        "--wait",
        "--timeout",
        "1s",
        "--interval",
        "0.5s",
        url=url,
    )
    assert timed_out.returncode == 2
    missing = specgate("gate", "check", "--rollout", "999", url=url)
    assert missing.returncode == 4 and "rollout 999 not found" in missing.stderr
    bad_url = specgate("gate", "check", "--rollout", "1", url="postgresql://u:pw@127.0.0.1:1/x")
    assert bad_url.returncode == 4 and "pw@" not in bad_url.stderr


def test_export_then_replay_reaches_the_same_decision(store, tmp_path):
    url, sessions = store
    rollout_id = rollout_with(sessions, count=600, candidate_pass=0.6)
    out = tmp_path / "pairs.jsonl"
    exported = specgate("pairs", "export", "--rollout", str(rollout_id), "--out", str(out), url=url)
    assert exported.returncode == 0 and "600 pairs written" in exported.stdout
    first = json.loads(out.read_text().splitlines()[0])
    assert first["candidate"]["evals"] in ({"task": True}, {"task": False})
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    replayed = subprocess.run(
        [
            sys.executable,
            "-m",
            "gate",
            "gate",
            "replay",
            "--pairs",
            str(out),
            "--policy",
            str(policy),
            "--every",
            "50",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert replayed.returncode == 0, replayed.stderr
    answer = json.loads(replayed.stdout)
    assert answer["decision"] == "kill" and answer["pairs"] <= 600


def test_check_json_names_the_winning_arm(store):
    url, sessions = store
    with sessions() as db, db.begin():
        rollout = armed(db, ["slow", "fast"])
        factories.seed_pairs(db, rollout.id, 600, tpot_ratio=0.95, arm="slow", seed=1)
        factories.seed_pairs(db, rollout.id, 600, tpot_ratio=0.7, arm="fast", seed=2)
        rid = rollout.id
    result = specgate("gate", "check", "--rollout", str(rid), "--json", url=url)
    body = json.loads(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert body["winner"] == "fast" and body["arms"]["leader"] == "fast"
    assert {a["arm"]: a["state"] for a in body["arms"]["arms"]} == {
        "slow": "running", "fast": "promoted"
    }  # fmt: skip
