"""The synthetic engine's /metrics agree with the per-request stats it answers with."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gate.engines.sim import SimProfile, create_sim_app
from tests.servers import serving


def test_sim_metrics_count_what_its_responses_report():
    profile = SimProfile(tokens=20, spec_tokens=4, acceptance=0.7)
    with serving(create_sim_app(profile)) as url:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        spec = httpx.post(f"{url}/v1/chat/completions", json=body).json()["metrics"]
        text = httpx.get(f"{url}/metrics").text
    values = {
        (s.name, s.labels.get("position", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    stats = spec["speculative_decoding"]
    assert values[("vllm:spec_decode_num_drafts_total", "")] == stats["num_spec_steps"]
    assert values[("vllm:spec_decode_num_draft_tokens_total", "")] == stats["num_draft_tokens"]
    accepted = stats["num_accepted_draft_tokens"]
    assert values[("vllm:spec_decode_num_accepted_tokens_total", "")] == accepted
    per_pos = sum(
        values[("vllm:spec_decode_num_accepted_tokens_per_pos_total", str(p))] for p in range(4)
    )
    assert per_pos == accepted
    assert values[("vllm:time_to_first_token_seconds_count", "")] == 1
