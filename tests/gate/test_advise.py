"""`specgate gate advise` on vLLM-format counters."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gate.cli.advise import position_acceptance
from gate.errors import BadRequest

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
