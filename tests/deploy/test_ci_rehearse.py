"""deploy/ci rehearsal examples: the GitHub Actions workflow and the GitLab CI jobs validate
against their schemas, name only real `specgate rehearse` options, and let the deploy run
only when the rehearsal exits 0 (scripts run here with a stand-in `specgate`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.deploy.compose import ROOT
from tests.deploy.test_ci_files import specgate_calls
from tests.deploy.tools import assert_cli_command, run, tool

GITHUB = ROOT / "deploy" / "ci" / "rehearse-github-actions.yml"
GITLAB = ROOT / "deploy" / "ci" / "rehearse-gitlab-ci.yml"
STEP = "Rehearse the candidate at rising concurrency"


def github_script() -> str:
    steps = yaml.safe_load(GITHUB.read_text())["jobs"]["rehearse"]["steps"]
    return next(step["run"] for step in steps if step["name"] == STEP)


def gitlab_script() -> str:
    return "\n".join(yaml.safe_load(GITLAB.read_text())["rehearse"]["script"])


@pytest.mark.parametrize(
    ("path", "schemas"),
    [
        (GITHUB, ["vendor.github-workflows", "custom.github-workflows-require-timeout"]),
        (GITLAB, ["vendor.gitlab-ci"]),
    ],
    ids=["github", "gitlab"],
)
def test_the_rehearsal_ci_files_match_their_schemas(path, schemas):
    validator = tool("check-jsonschema")
    for schema in schemas:
        result = run(validator, "--builtin-schema", schema, str(path))
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_deploy_waits_for_the_rehearsal_and_the_options_are_real():
    assert yaml.safe_load(GITHUB.read_text())["jobs"]["deploy"]["needs"] == "rehearse"
    gitlab = yaml.safe_load(GITLAB.read_text())
    assert gitlab["stages"] == ["rehearse", "deploy"] and gitlab["deploy"]["needs"] == ["rehearse"]
    for where, script in (("github", github_script()), ("gitlab", gitlab_script())):
        calls = specgate_calls(script)
        assert [call[0] for call in calls] == ["rehearse"], where
        assert_cli_command(calls[0], where)
        assert {"--at", "--max", "--budget", "--out"} <= set(calls[0]), where


# A stand-in `specgate`: logs its arguments, writes a summary, exits with STUB_CODE.
STUB = """#!{python}
import os, sys
from pathlib import Path
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
Path("rehearsal").mkdir(exist_ok=True)
Path("rehearsal/rehearsal.md").write_text("# specgate rehearsal\\n")
sys.exit(int(os.environ["STUB_CODE"]))
"""


def run_script(tmp_path, shell: list[str], script: str, code: int, workload: bool):
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    stub = folder / "specgate"
    stub.write_text(STUB.format(python=sys.executable))
    stub.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    if workload:
        (work / "workload.jsonl").write_text("{}\n")
    (work / "script.sh").write_text(script)
    env = {
        "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
        "STUB_LOG": str(tmp_path / "calls"),
        "STUB_CODE": str(code),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "BASELINE_URL": "http://base/v1",
        "CANDIDATE_URL": "http://spec/v1",
        "AT": "8",
        "MAX": "16",
        "BUDGET": "10m",
        "SPECGATE_BASELINE_URL": "http://base/v1",
        "SPECGATE_CANDIDATE_URL": "http://spec/v1",
        "SPECGATE_AT": "8",
        "SPECGATE_MAX": "16",
        "SPECGATE_BUDGET": "10m",
    }
    result = subprocess.run(
        [*shell, "script.sh"], cwd=work, env=env, capture_output=True, text=True, timeout=30
    )
    return result, (tmp_path / "calls").read_text()


BASH = shutil.which("bash") or "bash"
SCRIPTS = [
    ("github", [BASH, "--noprofile", "--norc", "-eo", "pipefail"], github_script()),
    ("gitlab", ["sh", "-e"], gitlab_script()),
]


@pytest.mark.parametrize(
    ("code", "passed", "message"),
    [
        (0, True, "pays at 8"),
        (1, False, "DOES NOT PAY"),
        (2, False, "could not tell"),
        (3, False, "NOT EXACT"),
        (4, False, "error"),
        (9, False, "unexpected exit status 9"),
    ],
)
@pytest.mark.parametrize(("name", "shell", "script"), SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_only_a_rehearsal_that_pays_passes(tmp_path, name, shell, script, code, passed, message):
    result, calls = run_script(tmp_path, shell, script, code, workload=name == "gitlab")
    assert (result.returncode == 0) == passed, result.stdout + result.stderr
    assert message in result.stdout
    assert "--baseline http://base/v1 --candidate http://spec/v1" in calls
    assert "--at 8" in calls and "--max 16" in calls
    assert ("--workload workload.jsonl" in calls) == (name == "gitlab")
    if name == "github":
        assert (tmp_path / "summary.md").read_text().startswith("# specgate rehearsal")


RECORD = "Record the rehearsal with its rollout"


def github_record_step() -> dict:
    steps = yaml.safe_load(GITHUB.read_text())["jobs"]["rehearse"]["steps"]
    return next(step for step in steps if step["name"] == RECORD)


@pytest.mark.postgres
def test_the_pipeline_records_its_rehearsal_with_the_rollout_through_the_real_api(
    tmp_path, pg_committing, pg_url
):
    """The GitHub step posts rehearsal.json to the control API: 201 passes and the rollout
    has it; a wrong key or a malformed summary fails the step with the API's answer."""
    import json

    import httpx

    from tests import factories
    from tests.gate.ui.harness import bearer, control_app, make_keys
    from tests.servers import serving

    step = github_record_step()
    assert "inputs.rollout_id != ''" in step["if"]
    with pg_committing() as db, db.begin():
        rollout_id = factories.rollout(db, name="rehearsed").id
    tokens = make_keys(pg_committing)
    work = tmp_path / "work"
    (work / "rehearsal").mkdir(parents=True)
    (work / "script.sh").write_text(step["run"])

    def record(summary: object, key: str) -> subprocess.CompletedProcess[str]:
        (work / "rehearsal" / "rehearsal.json").write_text(json.dumps(summary))
        env = {**os.environ, "SPECGATE_URL": base, "ADMIN_KEY": key, "ROLLOUT": str(rollout_id)}
        return subprocess.run(
            [BASH, "--noprofile", "--norc", "-eo", "pipefail", "script.sh"],
            cwd=work, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    with serving(control_app(pg_url, pg_committing)) as base:
        summary = factories.rehearsal_summary()
        refused = record(summary, tokens["read"])
        assert refused.returncode != 0 and "HTTP 403" in refused.stderr
        malformed = record({"levels": "no"}, tokens["admin"])
        assert malformed.returncode != 0 and "HTTP 422" in malformed.stderr
        got = httpx.get(
            f"{base}/v1/rollouts/{rollout_id}/rehearsal", headers=bearer(tokens["read"])
        )
        assert got.status_code == 404, got.text  # nothing recorded by the failed posts
        done = record(summary, tokens["admin"])
        assert done.returncode == 0, done.stdout + done.stderr
        assert "recorded: HTTP 201" in done.stdout
        got = httpx.get(
            f"{base}/v1/rollouts/{rollout_id}/rehearsal", headers=bearer(tokens["read"])
        )
        assert got.status_code == 200, got.text
