"""Stage semantics are visible: the share of requests the candidate gets now and next."""

from __future__ import annotations

from typer.testing import CliRunner

from gate.cli import app


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "300", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.output


def test_rollout_show_states_the_share_now_and_at_the_next_stage(sqlite_url):
    db = ("--database-url", sqlite_url)
    for name, role in (("b", "baseline"), ("c", "candidate")):
        cli("routes", "add", "--name", name, "--role", role, "--model", "m",
            "--base-url", "http://127.0.0.1:1/v1", *db)  # fmt: skip
    cli("rollout", "create", "--name", "r", "--alias", "a", "--baseline", "b",
        "--candidate", "c", "--sample-rate", "1.0", *db)  # fmt: skip
    assert "once running, 1 % of requests mirrored to the candidate" in cli(
        "rollout", "show", "1", *db
    )
    started = cli("rollout", "start", "1", *db)
    assert "1 % of requests mirrored to the candidate (sample rate 1 x stage 1/4 at 1 %)" in started
    assert "next stage (promote): 5 %" in started
    promoted = cli("rollout", "promote", "1", "-r", "looks good", *db)
    assert "5 % of requests mirrored" in promoted and "next stage (promote): 25 %" in promoted
    listed = cli("rollout", "list", *db)
    assert "5 %" in listed


def test_help_says_what_the_sample_rate_means():
    text = " ".join(cli("rollout", "create", "--help").split())
    assert "sample rate x the stage's percent" in text and "1 % at the first stage" in text
