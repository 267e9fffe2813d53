"""The synthetic engine's /metrics agree with the per-request stats it answers with, and
export the KV cache its running requests hold."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gate.engines.sim import SimProfile, create_sim_app
from tests.gate.engines.conftest import kv_cache_usage, streamed
from tests.servers import closed_port, serving
from tests.waits import wait_until


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


def answered(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v1/models", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_sim_engine_process_exports_the_kv_cache_it_holds():
    # A real `specgate engine --model sim` process: its KV cache holds each running
    # request's prompt and the tokens sent so far, out of --ctx-size positions.
    port = closed_port()
    command = [sys.executable, "-m", "gate", "engine", "--model", "sim", "--port", str(port),
               "--tokens", "40", "--token-interval-ms", "40", "--ctx-size", "1000"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: answered(url), 30)
        assert kv_cache_usage(url) == 0.0
        body = {
            "messages": [{"role": "user", "content": "x" * 400}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with ThreadPoolExecutor(2) as pool:
            running = [pool.submit(streamed, url, body) for _ in range(2)]
            seen: list[float] = []
            while not all(future.done() for future in running):
                seen.append(kv_cache_usage(url) or 0.0)
            usages = [future.result() for future in running]
        prompt = usages[0]["prompt_tokens"]
        # Both prompts at least, once both run; never more than both whole answers.
        assert max(seen) >= 2 * prompt / 1000
        assert max(seen) <= sum(u["total_tokens"] for u in usages) / 1000 <= 1
        assert wait_until(lambda: kv_cache_usage(url) == 0.0, 10)  # finished: freed
    finally:
        process.terminate()
        process.wait(timeout=10)
