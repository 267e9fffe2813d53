"""`gate replay` on pairs of several arms: per-arm verdicts and the winning arm."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from gate.cli.gatecmd import app
from gate.db.enums import Decision
from gate.errors import InputMalformed
from gate.stats.arms import ArmState
from gate.stats.arms_replay import has_arms, replay_arms
from gate.stats.policy import Policy
from gate.stats.simulated_pairs import Scenario, draw_pairs, to_records

# A short stage, so that a small file reaches its decision.
POLICY_YAML = "min_pairs: 400\nmin_duration_s: 0\nsegments: [chat]\n"
POLICY = Policy(min_pairs=400, min_duration_s=0.0, segments=["chat"])
runner = CliRunner()


def arm(name: str, scenario: Scenario, seed: int) -> list[dict]:
    records = to_records(draw_pairs(scenario, POLICY, 1, np.random.default_rng(seed)), POLICY)
    return [{**r, "arm": name, "pair_id": f"{name}-{r['pair_id']}"} for r in records]


@pytest.fixture(scope="module")
def three_arms() -> list[dict]:
    fast = arm("ngram-k4", Scenario("fast", 1500, tpot_ratio=0.75), 1)
    mid = arm("ngram-k2", Scenario("mid", 1500, tpot_ratio=0.9), 2)
    # Faster still, but it breaks an evaluator: it must be killed, never chosen.
    bad = arm("ngram-k8", Scenario("bad", 1500, tpot_ratio=0.7, eval_drops=(0.08, 0.0)), 3)
    return [r for triple in zip(fast, mid, bad, strict=True) for r in triple]


def write(path: Path, records: list[dict]) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    return path


def test_the_best_arm_wins_after_the_faster_harmful_arm_is_killed(three_arms):
    result = replay_arms(three_arms, POLICY, every=150)
    assert result.decision is Decision.PROMOTE and result.winner == "ngram-k4"
    by_name = {a.name: a for a in result.arms}
    assert by_name["ngram-k4"].state is ArmState.PROMOTED
    killed = by_name["ngram-k8"]
    assert killed.state is ArmState.KILLED and killed.decision is Decision.KILL
    assert killed.verdict is not None and "kill:eval:eval0:all" in killed.verdict.reason_codes
    assert killed.pairs < by_name["ngram-k4"].pairs  # reported as at its kill
    assert by_name["ngram-k2"].state is ArmState.RUNNING
    assert by_name["ngram-k4"].upper < by_name["ngram-k2"].lower


def test_cli_json_names_the_winner_and_each_arms_state(three_arms, tmp_path):
    path = write(tmp_path / "arms.jsonl", three_arms)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY_YAML)
    args = ["replay", "--pairs", str(path), "--policy", str(policy), "--every", "150"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["decision"] == "promote" and body["winner"] == "ngram-k4"
    states = {a["arm"]: a["state"] for a in body["arms"]}
    assert states == {"ngram-k4": "promoted", "ngram-k2": "running", "ngram-k8": "killed"}
    # Simulated records carry no output token counts: no acceptance length to report.
    assert all(a["acceptance_length"] is None and a["loop_compared"] == 0 for a in body["arms"])
    table = runner.invoke(app, args)
    assert table.exit_code == 0 and "winner ngram-k4" in table.output


def test_an_arm_added_later_starts_its_stream_late(three_arms):
    early = [r for r in three_arms if r["arm"] != "ngram-k2"][:600]
    # The third arm joins 200 s in (a pair a second per arm).
    late = [
        {**r, "created_at": r["created_at"] + 200.0} for r in three_arms if r["arm"] == "ngram-k2"
    ][:100]
    result = replay_arms(early + late, POLICY, every=100)
    by_name = {a.name: a for a in result.arms}
    assert [a.name for a in result.arms] == ["ngram-k4", "ngram-k8", "ngram-k2"]
    assert by_name["ngram-k2"].pairs == 100 and by_name["ngram-k4"].pairs == 300
    # A hundred pairs bound nothing yet (the warm-up is 200): unbounded, not best.
    assert by_name["ngram-k2"].upper == np.inf
    assert by_name["ngram-k2"].state is ArmState.RUNNING


def test_a_file_mixing_named_and_unnamed_arms_is_malformed(three_arms):
    records = [dict(three_arms[0]), {k: v for k, v in three_arms[1].items() if k != "arm"}]
    with pytest.raises(InputMalformed, match="names no arm"):
        replay_arms(records, POLICY)
    with pytest.raises(InputMalformed, match="arm is not"):
        has_arms([{**three_arms[0], "arm": 3}])
    assert not has_arms([{k: v for k, v in r.items() if k != "arm"} for r in three_arms[:5]])


def test_several_arms_in_canary_mode_are_refused(three_arms, tmp_path):
    path = write(tmp_path / "arms.jsonl", three_arms[:30])
    result = runner.invoke(app, ["replay", "--pairs", str(path), "--mode", "canary"])
    assert result.exit_code != 0


def test_control_pairs_that_name_no_arm_join_every_arm(three_arms):
    # The gateway mirrors a control pair to no arm, and the export writes its arm as null.
    controls = [
        {**r, "arm": None, "is_control": True, "pair_id": f"control-{r['pair_id']}"}
        for r in three_arms[::10]
    ]
    with_controls = sorted(three_arms + controls, key=lambda r: r["created_at"])
    result = replay_arms(with_controls, POLICY, every=150)
    assert result.total_pairs == len(three_arms) + len(controls)
    assert result.winner == "ngram-k4"
    by_name = {a.name: a for a in result.arms}
    assert by_name["ngram-k8"].state is ArmState.KILLED
