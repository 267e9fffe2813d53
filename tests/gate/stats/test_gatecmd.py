"""The `gate replay` and `gate simulate` commands."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from gate.cli.gatecmd import app
from gate.errors import BadRequest, ConfigError, InputMissing
from gate.stats.policy import Policy
from gate.stats.simulated_pairs import Scenario, draw_pairs, to_records

runner = CliRunner()


@pytest.fixture
def drop_pairs(tmp_path):
    policy = Policy()
    cols = draw_pairs(
        Scenario("drop", 3000, eval_drops=(0.1, 0.0)), policy, 1, np.random.default_rng(2)
    )
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in to_records(cols, policy)))
    return path


def test_replay_json_reports_the_first_decisive_verdict(drop_pairs):
    result = runner.invoke(app, ["replay", "--pairs", str(drop_pairs), "--every", "50", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["decision"] == "kill" and body["decisive"] is True
    assert body["pairs"] % 50 == 0 and body["pairs"] < 3000
    assert "kill:eval:eval0:all" in body["reason_codes"]
    assert {"metric", "segment", "estimate", "lower", "upper", "n"} <= set(body["estimates"][0])


def test_replay_table_and_policy_file(drop_pairs, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("guardrails: {evaluators: {default: {enabled: false}}}\n")
    result = runner.invoke(app, ["replay", "--pairs", str(drop_pairs), "--policy", str(policy)])
    assert result.exit_code == 0, result.output
    # Without the evaluator guardrail the drop goes unseen: the gain is missing too.
    assert "continue at pair 3,000 (no decision; last look" in result.output


def test_bad_policy_is_a_clear_error(drop_pairs, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("alpha_kill: 2\n")
    result = runner.invoke(app, ["replay", "--pairs", str(drop_pairs), "--policy", str(policy)])
    assert isinstance(result.exception, BadRequest) and "alpha_kill" in str(result.exception)
    missing = runner.invoke(app, ["replay", "--pairs", str(drop_pairs), "--policy", "/nope.yaml"])
    assert isinstance(missing.exception, InputMissing)


def test_simulate_prints_rates_with_intervals():
    result = runner.invoke(app, ["simulate", "--scenario", "drop5", "--runs", "20", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["scenario"] == "drop5" and row["runs"] == 20
    rate, lo, hi = row["kill"]
    assert lo <= rate <= hi and rate >= 0.9
    unknown = runner.invoke(app, ["simulate", "--scenario", "nope"])
    assert isinstance(unknown.exception, ConfigError)


def test_replay_json_shows_the_load_bands_as_the_verdict_does(tmp_path):
    # Pairs that carry each route's load: the backtest shows the gain per band of the
    # candidate's load, in the shape the verdicts API gives (`VerdictOut.bands`).
    policy = Policy()
    scenario = Scenario("banded", 1500, baseline_load=64.0, share=0.25, gain_at=(0.2, 0.2))
    cols = draw_pairs(scenario, policy, 1, np.random.default_rng(4))
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in to_records(cols, policy)))
    result = runner.invoke(app, ["replay", "--pairs", str(path), "--every", "1500", "--json"])
    assert result.exit_code == 0, result.output
    bands = json.loads(result.output)["bands"]
    assert bands and sum(band["n"] for band in bands) > 1000
    expected = {"band", "n", "ratio", "lower", "upper", "candidate_load", "baseline_load"}
    assert expected <= set(bands[0])
    proven = [band for band in bands if band["proven"]]  # an unbounded upper end is null
    assert proven and all(b["lower"] <= b["ratio"] <= b["upper"] < 1 for b in proven)


def test_replay_promoted_by_load_judges_only_load_matched_pairs(tmp_path):
    # The candidate ran about a quarter of the baseline's load: few pairs are matched.
    policy = Policy()
    scenario = Scenario("banded", 600, baseline_load=8.0, share=0.25)
    cols = draw_pairs(scenario, policy, 1, np.random.default_rng(4))
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in to_records(cols, policy)))
    by_load = tmp_path / "policy.yaml"
    by_load.write_text("promotion: {route_by_load: true}\n")
    args = ["replay", "--pairs", str(path), "--every", "600", "--policy", str(by_load)]
    plain = runner.invoke(app, args)
    assert plain.exit_code == 0, plain.output
    assert "not load-matched" not in plain.output
    judged = runner.invoke(app, [*args, "--promoted"])
    assert judged.exit_code == 0, judged.output
    assert "pair(s) not load-matched" in " ".join(judged.output.split())
