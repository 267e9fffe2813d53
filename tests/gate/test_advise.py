"""`specgate gate advise` on vLLM-format counters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from gate.cli.advise import position_acceptance
from gate.engines.sim import SimProfile, create_sim_app
from gate.errors import BadRequest
from tests.servers import serving

# Two engines (data parallel), with `_created` samples as real expositions carry.
EXPOSITION = """\
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 600.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 400.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 480.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 320.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 360.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 240.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 240.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="2"} 160.0
"""
# The accepted drafts over every position, and the tokens generated.
GENERATED = """\
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} 1800.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{{engine="0",model_name="m"}} {}
# TYPE vllm:request_success counter
vllm:request_success_total{{engine="0",model_name="m",finished_reason="stop"}} 100.0
"""


def test_counters_are_summed_over_engines_and_ignore_created():
    stats = position_acceptance(EXPOSITION)
    assert stats.drafts == 1000 and stats.accepted == (800, 600, 400)


def test_no_speculative_counters_is_a_clear_error():
    with pytest.raises(BadRequest, match="no speculative counters"):
        position_acceptance("# TYPE x counter\nx_total 1\n")


def test_the_command_recommends_k(tmp_path):
    scrape = tmp_path / "metrics.txt"
    scrape.write_text(EXPOSITION)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gate",
            "gate",
            "advise",
            "--metrics",
            str(scrape),
            "--cost-ratio",
            "0.1",
            "--max-k",
            "6",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    # Survival 0.8, 0.6, 0.4 then extrapolated: k=3 gives (1+1.8)/(1.3) = 2.15x.
    assert "num_speculative_tokens=" in result.stdout and "2.15x" in result.stdout


def advise_json(*args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "gate", "gate", "advise", *args, "--json"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_arms_are_proposed_with_their_engine_flags_and_an_add_arm_line(tmp_path):
    scrape = tmp_path / "metrics.txt"
    scrape.write_text(EXPOSITION + GENERATED.format(3900))
    found = advise_json("--metrics", str(scrape), "--verify-cost", "0.15", "--rollout", "7")
    # 3,900 generated - 1,800 accepted - 100 prefill tokens = 2,000 verify steps, 1,000
    # of which drafted.
    assert found["measured_k"] == 3 and found["draft_share"] == 0.5
    proposals = found["proposals"]
    assert 1 <= len(proposals) <= 3 and all(p["k"] != 3 for p in proposals)
    assert [p["speedup"] for p in proposals] == sorted((p["speedup"] for p in proposals),
                                                       reverse=True)  # fmt: skip
    first = proposals[0]
    config = {"method": "ngram", "num_speculative_tokens": first["k"], "prompt_lookup_min": 3,
              "prompt_lookup_max": 3}  # fmt: skip
    assert first["flags"] == f"--speculative-config '{json.dumps(config, separators=(',', ':'))}'"
    assert first["add_arm"].startswith(f"specgate rollout add-arm 7 --name ngram-k{first['k']} ")
    assert "tokens per verify step" in first["why"]
    assert found["note"].startswith("ranked by acceptance length: ranking by acceptance rate")


def test_llamacpp_arms_never_draft_below_their_lookup_n(tmp_path):
    scrape = tmp_path / "metrics.txt"
    scrape.write_text(EXPOSITION)
    found = advise_json("--metrics", str(scrape), "--engine", "llamacpp", "--lookup", "4",
                        "--verify-cost", "0.3", "--arms", "8")  # fmt: skip
    assert found["draft_share"] == 1.0  # no generated tokens exposed: not priced
    for arm in found["proposals"]:
        assert arm["prompt_lookup_max"] == min(4, arm["k"])
        assert f"--num-speculative-tokens {arm['k']}" in arm["flags"]
        assert f"--prompt-lookup-max {min(4, arm['k'])}" in arm["flags"]
        assert ("drafts nothing when k < n" in arm["why"]) == (arm["k"] < 4)
    assert any(arm["k"] < 4 for arm in found["proposals"])


def test_a_real_engines_counters_give_arms(tmp_path):
    profile = SimProfile(tokens=24, spec_tokens=4, acceptance=0.6)
    with serving(create_sim_app(profile)) as url:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        for _ in range(20):
            httpx.post(f"{url}/v1/chat/completions", json=body).raise_for_status()
        found = advise_json("--metrics", f"{url}/metrics", "--verify-cost", "0.1")
    assert found["measured_k"] == 4
    # The synthetic engine drafts on every step: its generated less accepted tokens less
    # its requests' first tokens are at most its drafts, so no step goes unpriced.
    assert found["draft_share"] == 1.0
    rates = [o["acceptance_rate"] for o in found["options"]]
    assert rates == sorted(rates, reverse=True)  # falls with k: not a ranking statistic
    assert found["proposals"] and all(p["k"] != 4 for p in found["proposals"])
