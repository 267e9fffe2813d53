"""`specgate rollout` with several candidate routes (arms): create, add, kill, show."""

from __future__ import annotations

from typer.testing import CliRunner

from gate.cli import app
from gate.errors import InputMalformed


def cli(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result.output


def test_arms_are_created_added_and_killed_from_the_cli(sqlite_url):
    db = ("--database-url", sqlite_url)
    cli("routes", "add", "--name", "plain", "--base-url", "http://b/v1", "--model", "m",
        "--role", "baseline", *db)  # fmt: skip
    for k in (2, 4, 8):
        cli("routes", "add", "--name", f"ngram-{k}", "--base-url", f"http://c{k}/v1",
            "--model", "m", "--role", "candidate", *db)  # fmt: skip
    cli("rollout", "create", "--name", "r", "--alias", "a", "--baseline", "plain",
        "--arm", "k2=ngram-2", "--arm", "k4=ngram-4", *db)  # fmt: skip
    cli("rollout", "start", "1", *db)
    added = cli("rollout", "add-arm", "1", "--name", "k8", "--route", "ngram-8", "-r", "wider", *db)
    assert "arm k8: ngram-8 (active)" in added
    killed = cli("rollout", "kill-arm", "1", "k4", "-r", "quality dropped", *db)
    assert "arm k4: ngram-4 (killed)" in killed and "arm k2: ngram-2 (active)" in killed
    assert "state=running" in killed


def refused(*args: str) -> str:
    """What a refused command says (`specgate` prints it as one line, exit code 2)."""
    result = CliRunner().invoke(app, list(args))
    assert isinstance(result.exception, InputMalformed), result.output
    return result.exception.message


def test_a_bad_arm_is_one_clear_line(sqlite_url):
    db = ("--database-url", sqlite_url)
    create = ("rollout", "create", "--name", "r", "--alias", "a", "--baseline", "b", *db)
    assert "give exactly one of candidate_route or arms" in refused(*create)
    assert "give NAME=ROUTE" in refused(*create, "--arm", "k2")
    assert "should match pattern" in refused(*create, "--arm", "k 2=ngram-2")
