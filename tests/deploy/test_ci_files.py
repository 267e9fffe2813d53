"""deploy/ci: the GitHub Actions workflow and the GitLab CI job validate against their
schemas, name only real `specgate` commands and options, and their scripts map each
`specgate gate check` exit code to the right outcome (run here with a stand-in `specgate`)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.compose import ROOT
from tests.deploy.tools import assert_cli_command, run, tool

CI = ROOT / "deploy" / "ci"
GITHUB = CI / "github-actions.yml"
GITLAB = CI / "gitlab-ci.yml"


def github_steps() -> dict[str, dict]:
    workflow = yaml.safe_load(GITHUB.read_text())
    return {
        step["name"]: {**step, "job": job}
        for job, spec in workflow["jobs"].items()
        for step in spec["steps"]
    }


def gitlab_jobs() -> dict[str, dict]:
    return {k: v for k, v in yaml.safe_load(GITLAB.read_text()).items() if "script" in v}


def scripts() -> list[tuple[str, str]]:
    out = [(f"github: {name}", step["run"]) for name, step in github_steps().items()]
    out += [(f"gitlab: {name}", "\n".join(job["script"])) for name, job in gitlab_jobs().items()]
    return out


def specgate_calls(script: str) -> list[list[str]]:
    """Every `specgate ...` command line of a shell script (continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", script)
    calls = []
    # At a command's position only: a line's start, `$(`, or after `||`, `&&`, `;`.
    position = r"(?:^\s*|\$\(|\|\|\s*|&&\s*|;\s*)specgate\s"
    for line in joined.splitlines():
        for match in re.finditer(position, line):
            lexer = shlex.shlex(line[match.end() :], posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words = []
            for token in lexer:
                if set(token) <= set("|;&()"):
                    break  # the end of this command
                words.append(token)
            calls.append(words)
    return calls


@pytest.mark.parametrize(
    ("path", "schemas"),
    [
        (GITHUB, ["vendor.github-workflows", "custom.github-workflows-require-timeout"]),
        (GITLAB, ["vendor.gitlab-ci"]),
    ],
    ids=["github", "gitlab"],
)
def test_the_ci_files_match_their_schemas(path, schemas):
    validator = tool("check-jsonschema")
    for schema in schemas:
        result = run(validator, "--builtin-schema", schema, str(path))
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_catches_a_mistake(tmp_path):
    validator = tool("check-jsonschema")
    broken = yaml.safe_load(GITLAB.read_text())
    broken["gate"]["when"] = "sometimes"
    path = tmp_path / "gitlab-ci.yml"
    path.write_text(yaml.safe_dump(broken))
    assert run(validator, "--builtin-schema", "vendor.gitlab-ci", str(path)).returncode == 1


def test_the_scripts_name_only_real_commands_and_options():
    seen = set()
    for where, script in scripts():
        for call in specgate_calls(script):
            assert_cli_command(call, where)
            seen.add(" ".join(w for w in call[:2] if not w.startswith("-")))
    assert {
        "gate check", "rollout promote", "rollout kill", "rollout create", "rollout start",
        "rollout show", "routes add",
    } <= seen  # fmt: skip


def test_the_gate_sits_between_deploying_the_candidate_and_promoting():
    workflow = yaml.safe_load(GITHUB.read_text())
    assert workflow["jobs"]["gate"]["needs"] == "deploy-candidate"
    gate = github_steps()["Gate check, then promote (stage by stage)"]["run"]
    assert gate.index("gate check") < gate.index("rollout promote")
    assert "--wait --timeout" in gate
    gitlab = yaml.safe_load(GITLAB.read_text())
    assert gitlab["stages"] == ["deploy-candidate", "gate"]
    assert gitlab["gate"]["needs"] == ["deploy-candidate"]
    script = "\n".join(gitlab["gate"]["script"])
    assert script.index("gate check") < script.index("rollout promote")


# A stand-in for the specgate CLI: a rollout with STUB_STAGES stages whose `gate check`
# answers come from STUB_CODES, one per call; every call is logged.
STUB = """#!{python}
import os, sys
from pathlib import Path

state = Path(os.environ["STUB_DIR"])
args = sys.argv[1:]
with open(state / "calls", "a") as log:
    log.write(" ".join(args) + "\\n")
status = (state / "status").read_text() if (state / "status").exists() else "running"
stage = int((state / "stage").read_text()) if (state / "stage").exists() else 0
if args[:2] == ["gate", "check"]:
    codes = (state / "codes").read_text().split()
    (state / "codes").write_text(" ".join(codes[1:]))
    print("rollout 7 stage", stage, "verdict")
    sys.exit(int(codes[0]))
if args[:2] == ["rollout", "show"]:
    print(f"rollout 7 r: alias=a mode=shadow state={{status}} stage={{stage}}")
elif args[:2] == ["rollout", "promote"]:
    stage += 1
    (state / "stage").write_text(str(stage))
    if stage >= int(os.environ["STUB_STAGES"]):
        (state / "status").write_text("promoted")
    print("promoted a stage")
elif args[:2] == ["rollout", "kill"]:
    (state / "status").write_text("killed")
elif args[:2] == ["rollout", "create"]:
    print("rollout 7 r created (pending)")
"""


@pytest.fixture
def stub(tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "specgate"
    script.write_text(STUB.format(python=sys.executable))
    script.chmod(0o755)
    return tmp_path


def run_script(shell: list[str], script: str, stub: Path, codes: list[int], stages: int, **env):
    (stub / "codes").write_text(" ".join(map(str, codes)))
    for name in ("calls", "status", "stage"):
        (stub / name).unlink(missing_ok=True)
    environment = {
        "PATH": f"{stub / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "STUB_DIR": str(stub),
        "STUB_STAGES": str(stages),
        "ROLLOUT_ID": "7",
        "GATE_TIMEOUT": "30m",
        "MAX_STAGES": "8",
        "GITHUB_RUN_ID": "99",
        "CI_PIPELINE_ID": "99",
        **env,
    }
    path = stub / "script.sh"
    path.write_text(script)
    result = subprocess.run(
        [*shell, str(path)], env=environment, capture_output=True, text=True, timeout=30
    )
    calls = (stub / "calls").read_text().splitlines() if (stub / "calls").exists() else []
    return result, calls


def gate_scripts() -> list[tuple[str, list[str], str]]:
    bash = shutil.which("bash") or "bash"
    github = github_steps()["Gate check, then promote (stage by stage)"]["run"]
    gitlab = "\n".join(gitlab_jobs()["gate"]["script"])
    # GitHub's `shell: bash` is `bash --noprofile --norc -eo pipefail`; GitLab's script must
    # also work in a plain POSIX sh with errexit.
    return [
        ("github", [bash, "--noprofile", "--norc", "-eo", "pipefail"], github),
        ("gitlab", ["sh", "-e"], gitlab),
    ]


GATE = gate_scripts()


@pytest.mark.parametrize(("name", "shell", "script"), GATE, ids=[g[0] for g in GATE])
def test_promote_verdicts_promote_every_stage_and_pass(name, shell, script, stub):
    result, calls = run_script(shell, script, stub, [0, 0, 0], stages=3)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sum(c.startswith("rollout promote 7") for c in calls) == 3
    assert sum(c.startswith("gate check --rollout 7 --wait --timeout 30m") for c in calls) == 3
    assert "promoted" in result.stdout


@pytest.mark.parametrize(
    ("code", "expected"),
    [(1, "KILL"), (2, "no verdict within 30m"), (3, "HOLD"), (4, "gate check failed"), (9, "9")],
)
@pytest.mark.parametrize(("name", "shell", "script"), GATE, ids=[g[0] for g in GATE])
def test_every_other_verdict_fails_with_its_message(name, shell, script, stub, code, expected):
    result, calls = run_script(shell, script, stub, [0, code], stages=3)
    assert result.returncode == 1, result.stdout + result.stderr
    assert expected in result.stdout
    assert sum(c.startswith("rollout promote") for c in calls) == 1  # the first stage only
    assert any(c.startswith("rollout kill 7") for c in calls) == (code == 1)


@pytest.mark.parametrize(("name", "shell", "script"), GATE, ids=[g[0] for g in GATE])
def test_the_stage_loop_is_bounded(name, shell, script, stub):
    result, calls = run_script(shell, script, stub, [0] * 10, stages=10, MAX_STAGES="2")
    assert result.returncode == 1 and "not promoted after 2 stages" in result.stdout
    assert sum(c.startswith("gate check") for c in calls) == 2


def test_the_deploy_steps_hand_the_rollout_id_to_the_gate(stub, tmp_path):
    bash = shutil.which("bash") or "bash"
    steps = github_steps()
    output, github_env = tmp_path / "output", tmp_path / "env"
    env = {
        "GITHUB_OUTPUT": str(output),
        "GITHUB_ENV": str(github_env),
        "GITHUB_SHA": "0123456789abcdef",
        "ALIAS": "llama-8b",
        "CANDIDATE_URL": "http://spec:8000/v1",
        "SPEC_METHOD": "ngram",
        "BASELINE_ROUTE": "llama-8b-base",
        "SAMPLE_RATE": "0.1",
    }
    shell = [bash, "--noprofile", "--norc", "-eo", "pipefail"]
    result, calls = run_script(
        shell, steps["Register the candidate route"]["run"], stub, [], 1, **env
    )
    assert result.returncode == 0, result.stderr
    assert github_env.read_text().strip() == "CANDIDATE_ROUTE=llama-8b-spec-01234567"
    assert "--metrics-url http://spec:8000/metrics" in calls[0]
    env["CANDIDATE_ROUTE"] = "llama-8b-spec-01234567"
    result, calls = run_script(
        shell, steps["Create and start the rollout"]["run"], stub, [], 1, **env
    )
    assert result.returncode == 0, result.stderr
    assert output.read_text().strip() == "rollout_id=7"
    assert calls[-1].startswith("rollout start 7")
    gitlab = "\n".join(gitlab_jobs()["deploy-candidate"]["script"])
    gitlab_env = {
        "SPECGATE_ALIAS": "llama-8b",
        "SPECGATE_CANDIDATE_URL": "http://spec:8000/v1",
        "SPECGATE_BASELINE_ROUTE": "llama-8b-base",
        "SPECGATE_SPEC_METHOD": "ngram",
        "SPECGATE_SAMPLE_RATE": "0.1",
        "CI_COMMIT_SHORT_SHA": "01234567",
    }
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        result, calls = run_script(["sh", "-e"], gitlab, stub, [], 1, **gitlab_env)
    finally:
        os.chdir(cwd)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "rollout.env").read_text().strip() == "ROLLOUT_ID=7"
    assert "--candidate llama-8b-spec-01234567" in calls[1]
