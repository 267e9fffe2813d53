"""deploy/ci on a real runner's terms: the deploy jobs' own scripts, run with the real
`specgate` against real Postgres, succeed when re-run for the same commit; the GitHub job's
container user can write the runner's files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from gate.db import migrate
from gate.db.engine import make_engine
from gate.db.enums import RolloutState, RouteRole
from gate.db.models import AuditEvent, Rollout, Route
from gate.rollouts import routes
from gate.rollouts.schemas import RouteIn
from tests.deploy.compose import ROOT
from tests.deploy.test_ci_files import GITHUB, github_steps, gitlab_jobs

BASH = shutil.which("bash") or "bash"
GITHUB_SHELL = [BASH, "--noprofile", "--norc", "-eo", "pipefail"]
DEPLOY_STEPS = ("Register the candidate route", "Create and start the rollout")
# The runner's user on GitHub-hosted runners; its file-command files are created 0644.
RUNNER_UID = 1001


@pytest.fixture
def store(empty_pg_url):
    migrate.upgrade(empty_pg_url)
    engine = make_engine(empty_pg_url)
    with Session(engine) as db, db.begin():
        for alias in ("gh", "gl"):
            spec = RouteIn(
                name=f"{alias}-base", base_url="http://base:8000/v1", model=alias,
                role=RouteRole.BASELINE,
            )  # fmt: skip
            routes.register_route(db, spec=spec, actor="test")
    yield empty_pg_url, engine
    engine.dispose()


def environment(url: str, **extra: str) -> dict[str, str]:
    """The job's environment: the real specgate CLI of this checkout, and the store."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    keep = {k: os.environ[k] for k in ("HOME", "PYTHONPATH") if k in os.environ}
    return {**keep, "PATH": path, "SPECGATE_DATABASE_URL": url, "NO_COLOR": "1", **extra}


def run(shell: list[str], script: str, env: dict[str, str], cwd: Path) -> str:
    path = cwd / "step.sh"
    path.write_text(script)
    result = subprocess.run(
        [*shell, str(path)], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def github_attempt(url: str, folder: Path) -> str:
    """Run the deploy job's steps as the runner does; return the rollout id it outputs."""
    folder.mkdir()
    files = {"GITHUB_ENV": folder / "env", "GITHUB_OUTPUT": folder / "output"}
    env = environment(
        url, GITHUB_SHA="0123456789abcdef", GITHUB_RUN_ID="4242", ALIAS="gh",
        CANDIDATE_URL="http://spec:8000/v1", SPEC_METHOD="ngram", BASELINE_ROUTE="gh-base",
        SAMPLE_RATE="0.1", **{k: str(v) for k, v in files.items()},
    )  # fmt: skip
    steps = github_steps()
    for name in DEPLOY_STEPS:
        run(GITHUB_SHELL, steps[name]["run"], env, folder)
        # What the runner does between steps: $GITHUB_ENV lines become the environment.
        if files["GITHUB_ENV"].exists():
            env |= dict(line.split("=", 1) for line in files["GITHUB_ENV"].read_text().split())
    return files["GITHUB_OUTPUT"].read_text().split("=", 1)[1].strip()


def gitlab_attempt(url: str, folder: Path) -> str:
    folder.mkdir()
    env = environment(
        url, SPECGATE_ALIAS="gl", SPECGATE_BASELINE_ROUTE="gl-base",
        SPECGATE_CANDIDATE_URL="http://spec:8000/v1", SPECGATE_SPEC_METHOD="ngram",
        SPECGATE_SAMPLE_RATE="0.1", CI_COMMIT_SHORT_SHA="01234567", CI_PIPELINE_ID="77",
    )  # fmt: skip
    run(["sh", "-e"], "\n".join(gitlab_jobs()["deploy-candidate"]["script"]), env, folder)
    return (folder / "rollout.env").read_text().strip().split("=", 1)[1]


@pytest.mark.postgres
def test_a_deploy_job_re_run_for_the_same_commit_succeeds(store, tmp_path):
    url, engine = store
    for attempt, alias in ((github_attempt, "gh"), (gitlab_attempt, "gl")):
        first = attempt(url, tmp_path / f"{alias}-1")
        again = attempt(url, tmp_path / f"{alias}-2")
        assert first == again, "the re-run carries on with the same rollout"
        with Session(engine) as db:
            rollout = db.get(Rollout, int(first))
            assert rollout is not None and rollout.state is RolloutState.RUNNING
            assert rollout.candidate_route.name == f"{alias}-spec-01234567"
            starts = db.scalars(
                select(AuditEvent).where(
                    AuditEvent.rollout_id == rollout.id, AuditEvent.action == "start"
                )
            ).all()
            assert len(starts) == 1, "started once, not again by the re-run"
    with Session(engine) as db:
        assert len(db.scalars(select(Route)).all()) == 4  # two baselines, two candidates


def container_user(job: dict) -> str:
    """The user a job's container runs as: `--user` in its options, else the image's USER."""
    words = str(job["container"].get("options", "")).split()
    for i, word in enumerate(words):
        if word in ("--user", "-u"):
            return words[i + 1]
        if word.startswith("--user="):
            return word.split("=", 1)[1]
    users = [line.split()[1] for line in (ROOT / "Dockerfile").read_text().splitlines()
             if line.startswith("USER ")]  # fmt: skip
    return users[-1]


def writes_runner_files(job: dict) -> bool:
    return any(
        f"${name}" in step.get("run", "") or f"${{{name}}}" in step.get("run", "")
        for step in job["steps"]
        for name in ("GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_PATH", "GITHUB_STEP_SUMMARY")
    )


def write_as(user: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Append to a file made like the runner's file-command files, as `user`."""
    target = tmp_path / "set_output"
    target.write_text("")
    os.chown(target, RUNNER_UID, RUNNER_UID)
    target.chmod(0o644)
    uid, _, gid = user.partition(":")
    ids = {"root": "0"}
    uid, gid = ids.get(uid, uid), ids.get(gid, gid) if gid else ids.get(uid, uid)
    command = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    script = f'echo "rollout_id=7" >> "{target}"'
    return subprocess.run([*command, "sh", "-c", script], capture_output=True, text=True)


def test_the_github_container_user_can_write_the_runner_s_files(tmp_path):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip(
            reason="needs root and setpriv to act as the runner's and the container's users"
        )
    tmp_path.chmod(0o755)
    jobs = yaml.safe_load(GITHUB.read_text())["jobs"]
    checked = 0
    for name, job in jobs.items():
        if "container" in job and writes_runner_files(job):
            result = write_as(container_user(job), tmp_path)
            assert result.returncode == 0, f"{name}: {result.stderr}"
            checked += 1
    assert checked, "the deploy job writes $GITHUB_ENV and $GITHUB_OUTPUT"
    # The image's own user (what the job ran as before) is refused by the same file.
    refused = write_as(container_user({"container": {}}), tmp_path)
    assert refused.returncode != 0 and "Permission denied" in refused.stderr
