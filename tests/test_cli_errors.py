"""Every CLI command fails with one clear line and a distinct exit code: an unreachable
database (named, password masked), a missing schema, missing or malformed input files, bad
YAML and out-of-range options. Commands run in-process through `main()`, as the console
script does; one also runs as a real process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gate.cli import main
from gate.cli.exits import DATA_ERROR, NO_INPUT, NO_SCHEMA, UNAVAILABLE, USAGE
from gate.cli.gatecheck import ERROR_EXIT
from tests.servers import closed_port

CREATE = ["rollout", "create", "--name", "n", "--alias", "a", "--baseline", "b", "--candidate", "c"]
ROUTE = ["--name", "b", "--base-url", "http://h/v1", "--model", "m", "--role", "baseline"]
# Commands that read the store, with the exit code their errors get (`gate check` keeps its
# documented 4, which a deploy pipeline tells apart from a decision).
DB_COMMANDS = {
    "gate check": ["gate", "check", "--rollout", "1"],
    "pairs export": ["pairs", "export", "--rollout", "1"],
    "rollout list": ["rollout", "list"],
    "rollout show": ["rollout", "show", "1"],
    "rollout kill": ["rollout", "kill", "1", "--reason", "x"],
    "routes list": ["routes", "list"],
    "keys list": ["keys", "list"],
    "status": ["status"],
    "report weekly": ["report", "weekly", "--out", "report"],
    "rollout create": CREATE,
    "rollout start": ["rollout", "start", "1"],
    "rollout hold": ["rollout", "hold", "1", "--reason", "x"],
    "rollout resume": ["rollout", "resume", "1", "--reason", "x"],
    "rollout promote": ["rollout", "promote", "1", "--reason", "x"],
    "routes add": ["routes", "add", *ROUTE],
    "keys create": ["keys", "create", "--name", "k"],
    "keys revoke": ["keys", "revoke", "k"],
}
# Commands that manage the schema itself: only an unreachable database applies.
SCHEMA_COMMANDS = {"db upgrade": ["db", "upgrade"], "db current": ["db", "current"]}


def run(capsys, *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        sys.argv = ["specgate", *args]
        main()
    err = capsys.readouterr().err
    return int(exited.value.code or 0), err


def assert_one_line(err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], err


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    for name in ("SPECGATE_DATABASE_URL", "SPECGATE_HOME", "SPECGATE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))


@pytest.mark.parametrize("name", DB_COMMANDS)
def test_an_unreachable_database_is_one_line_naming_it_masked(capsys, name):
    args = DB_COMMANDS[name]
    url = f"postgresql://ops:hunter2@127.0.0.1:{closed_port()}/specgate"
    code, err = run(capsys, *args, "--database-url", url)
    assert code == (ERROR_EXIT if name == "gate check" else UNAVAILABLE), err
    assert_one_line(err, f"127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}", "***")
    assert "hunter2" not in err


@pytest.mark.parametrize("name", SCHEMA_COMMANDS)
def test_schema_commands_on_an_unreachable_database_are_one_line(capsys, name):
    url = f"postgresql://ops:hunter2@127.0.0.1:{closed_port()}/specgate"
    code, err = run(capsys, *SCHEMA_COMMANDS[name], "--database-url", url)
    assert code == UNAVAILABLE, err
    assert_one_line(err, "cannot reach database", "***")
    assert "hunter2" not in err


@pytest.mark.parametrize("name", DB_COMMANDS)
def test_a_database_without_schema_names_db_upgrade(capsys, tmp_path, name):
    args = DB_COMMANDS[name]
    code, err = run(capsys, *args, "--database-url", f"sqlite:///{tmp_path}/empty.db")
    assert code == (ERROR_EXIT if name == "gate check" else NO_SCHEMA), err
    assert_one_line(err, "specgate db upgrade")


SIDE = '{"ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 4.0, "status": "ok"}'
GOOD_PAIR = f'{{"pair_id": "a", "created_at": 1, "baseline": {SIDE}, "candidate": {SIDE}}}'


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["gate", "replay", "--pairs", "missing.jsonl"], NO_INPUT, "missing.jsonl"),
        (["gate", "replay", "--pairs", "{bad}"], DATA_ERROR, "not JSON"),
        (["gate", "replay", "--pairs", "{nonnumeric}"], DATA_ERROR, "pair 1"),
        (["gate", "replay", "--pairs", "{good}", "--policy", "missing.yaml"], NO_INPUT, "missing"),
        (["gate", "replay", "--pairs", "{good}", "--policy", "{yaml}"], DATA_ERROR, "YAML"),
        (["gate", "simulate", "--policy", "{yaml}"], DATA_ERROR, "YAML"),
        (["gate", "simulate", "--policy", "{range}"], DATA_ERROR, "alpha_kill"),
        (
            [*CREATE, "--policy", "{yaml}"],
            DATA_ERROR,
            "YAML",
        ),
        (
            [*CREATE, "--policy", "missing.yaml"],
            NO_INPUT,
            "missing.yaml",
        ),
        (["gate", "replay", "--pairs", "{good}", "--candidate-share", "1.5"], USAGE, "1.5"),
        (["gate", "replay", "--pairs", "{good}", "--candidate-share", "0"], USAGE, "0"),
        (["gate", "replay", "--pairs", "{good}", "--every", "0"], USAGE, "--every"),
        (["gate", "simulate", "--runs", "0"], USAGE, "--runs"),
        (["gate", "simulate", "--kayenta-every", "-1"], USAGE, "--kayenta-every"),
        (
            [*CREATE, "--sample-rate", "2"],
            USAGE,
            "--sample-rate",
        ),
        (["gate", "check", "--rollout", "1", "--timeout", "soon"], ERROR_EXIT, "soon"),
        (
            ["routes", "launch", "--route-file", "missing.yaml", "--dry-run"],
            NO_INPUT,
            "missing.yaml",
        ),
        (["routes", "launch", "--route-file", "{yaml}", "--dry-run"], DATA_ERROR, "YAML"),
        (["nosuch"], USAGE, "nosuch"),
        (["demo", "--fault", "nosuch"], USAGE, "biased-sampler"),
        (["demo", "--fault", "biased-sampler", "--backend", "llamacpp"], USAGE, "transformers"),
        (["demo", "--arms", "2,four"], USAGE, "2,4,8"),
        (["demo", "--arms", "4,4"], USAGE, "distinct"),
        (["demo", "--arms", "1,2,3,4,5"], USAGE, "at most 4"),
        (["demo", "--arms", "2,4", "--sampled"], USAGE, "llamacpp"),
        (["demo", "--engine-timeout", "0"], USAGE, "--engine-timeout"),
    ],
)
def test_bad_input_files_and_options_are_one_line_with_their_code(
    capsys, tmp_path, args, code, needle
):
    texts = {
        "{bad}": "{not json\n",
        "{nonnumeric}": GOOD_PAIR.replace('"tpot_s": 0.02', '"tpot_s": "x"', 1) + "\n",
        "{good}": GOOD_PAIR + "\n",
        "{yaml}": "stages: [1, 5\nsegments: {\n",
        "{range}": "alpha_kill: 2\n",
    }
    files = {}
    for n, (marker, text) in enumerate(texts.items()):
        files[marker] = str(tmp_path / f"input{n}")
        (tmp_path / f"input{n}").write_text(text)
    argv = [files.get(arg, arg) for arg in args]
    got, err = run(capsys, *argv)
    assert got == code, err
    assert_one_line(err, needle)


def test_a_real_process_prints_one_line_for_an_unreachable_database(tmp_path):
    url = f"postgresql://ops:hunter2@127.0.0.1:{closed_port()}/specgate"
    result = subprocess.run(
        [sys.executable, "-m", "gate", "rollout", "list", "--database-url", url],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=120,
    )
    assert result.returncode == UNAVAILABLE, result.stderr
    assert_one_line(result.stderr, "cannot reach database", "***")
