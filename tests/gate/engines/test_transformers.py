"""The transformers reference backend: speculative greedy output equals plain, token for token."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from gate.engines.base import GenRequest
from gate.engines.decode import Sampler, decode_steps
from gate.engines.ngram import NgramDrafter
from gate.engines.server import create_engine_app
from gate.engines.spec import NgramConfig, SpecStats
from tests.gate.engines.conftest import kv_cache_usage, streamed
from tests.servers import serving
from tests.waits import wait_until

SPEC = NgramConfig(num_speculative_tokens=8, prompt_lookup_min=2, prompt_lookup_max=3)
PROMPTS = [
    "Proofread and output only the corrected text: Pleese bring you're laptop to the meeting "
    "on thursday, and dont forget the quartely figures.",
    "Write a short poem about the sea.",
    "Rewrite with type hints:\n\ndef add(a, b):\n    return a + b\n",
]


@pytest.fixture(scope="module")
def backend(transformers_ready: Path):  # the plain backend; `.with_spec` shares its weights
    from gate.engines.hf import TransformersBackend

    return TransformersBackend(transformers_ready, spec=None)


def tokens(backend, prompt: str, *, spec: NgramConfig | None, limit: int = 24) -> tuple:
    messages = [{"role": "user", "content": prompt}]
    request = GenRequest(chat=True, messages=messages, prompt="", max_tokens=limit, temperature=0)
    ids = backend.prompt_ids(request)
    stats = SpecStats(spec.num_speculative_tokens) if spec else None
    drafter = NgramDrafter(ids, n_min=2, n_max=3) if spec else None
    steps = decode_steps(
        backend.model,
        backend.torch,
        ids,
        sampler=Sampler(backend.torch, 0.0, 1.0),
        max_tokens=limit,
        drafter=drafter,
        k=spec.num_speculative_tokens if spec else 0,
        stats=stats,
    )
    out: list[int] = []
    for produced in steps:
        out.extend(produced)
        if len(out) >= limit:
            break
    steps.close()
    return out[:limit], stats


def test_speculative_greedy_equals_plain_token_for_token(backend):
    accepted = 0
    for prompt in PROMPTS:
        plain, _ = tokens(backend, prompt, spec=None)
        speculative, stats = tokens(backend, prompt, spec=SPEC)
        assert speculative == plain, prompt
        accepted += stats.num_accepted_draft_tokens
    assert accepted > 0, "the copy-heavy prompt should accept drafts"


@pytest.fixture(scope="module")
def engines(backend) -> Iterator[dict[str, str]]:
    speculative = backend.with_spec(SPEC)
    processed = backend.with_spec(SPEC, logprobs_mode="processed")
    with (
        serving(create_engine_app(lambda: backend, model="smol")) as plain_url,
        serving(create_engine_app(lambda: speculative, model="smol")) as spec_url,
        serving(create_engine_app(lambda: processed, model="smol")) as processed_url,
    ):
        yield {"plain": plain_url, "spec": spec_url, "processed": processed_url}


def chat(url: str, content: str, **extra: object) -> dict:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 16, **extra}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def test_served_answers_match_and_report_positions(engines):
    plain = chat(engines["plain"], PROMPTS[0], temperature=0)
    speculative = chat(engines["spec"], PROMPTS[0], temperature=0)
    assert speculative["choices"][0]["message"] == plain["choices"][0]["message"]
    spec = speculative["metrics"]["speculative_decoding"]
    assert sum(spec["acceptance_histogram"]) == spec["num_spec_steps"] > 0
    metrics = httpx.get(f"{engines['spec']}/metrics").text
    accepted = spec["num_accepted_draft_tokens"]
    assert (
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="smol"}} {accepted}.0'
        in metrics
    )
    assert (
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smol",position="7"}'
        in metrics
    )


def test_seeded_sampling_and_stop(engines):
    url = engines["spec"]
    first = chat(url, PROMPTS[1], temperature=0.9, seed=3)
    assert chat(url, PROMPTS[1], temperature=0.9, seed=3)["choices"] == first["choices"]
    text = chat(url, PROMPTS[1], temperature=0)["choices"][0]["message"]["content"]
    word = text.split()[2]
    stopped = chat(url, PROMPTS[1], temperature=0, stop=[word])
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["choices"][0]["message"]["content"] == text[: text.index(word)]


def stream_chunks(url: str, body: dict) -> list[dict]:
    chunks = []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line.removeprefix("data: ")))
    return chunks


def test_logprobs_in_the_openai_chat_format(engines):
    url = engines["spec"]
    answer = chat(url, PROMPTS[0], temperature=0, logprobs=True, top_logprobs=2)
    choice = answer["choices"][0]
    entries = choice["logprobs"]["content"]
    assert len(entries) == answer["usage"]["completion_tokens"] == 16
    assert "".join(e["token"] for e in entries) == choice["message"]["content"]
    for entry in entries:
        assert entry["logprob"] <= 0.0
        assert bytes(entry["bytes"]) == entry["token"].encode()
        assert [t["logprob"] for t in entry["top_logprobs"]] == sorted(
            (t["logprob"] for t in entry["top_logprobs"]), reverse=True
        )
        # Greedy: the emitted token is the most likely one.
        assert entry["top_logprobs"][0]["token"] == entry["token"]
    # Speculation does not change what is reported: the plain engine gives the same values.
    plain = chat(engines["plain"], PROMPTS[0], temperature=0, logprobs=True)
    plain_entries = plain["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in plain_entries] == [e["token"] for e in entries]
    assert [e["logprob"] for e in plain_entries] == pytest.approx(
        [e["logprob"] for e in entries], abs=1e-3
    )
    assert chat(url, PROMPTS[0], temperature=0)["choices"][0]["logprobs"] is None
    body = {"messages": [{"role": "user", "content": PROMPTS[0]}], "max_tokens": 16}
    streamed = stream_chunks(url, {**body, "temperature": 0, "stream": True, "logprobs": True})
    pieces = [c["choices"][0]["logprobs"] for c in streamed if c["choices"]]
    flat = [e["token"] for part in pieces if part for e in part["content"]]
    assert flat == [e["token"] for e in entries]


def well_formed(entry: dict, top: int) -> None:
    """Check one OpenAI chat `logprobs.content` entry and its `top` alternatives."""
    assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
    assert bytes(entry["bytes"]) == entry["token"].encode() and entry["logprob"] <= 0.0
    alternatives = entry["top_logprobs"]
    assert 0 < len(alternatives) <= top
    for item in alternatives:
        assert set(item) == {"token", "logprob", "bytes"}
        assert bytes(item["bytes"]) == item["token"].encode() and item["logprob"] <= 0.0
    values = [t["logprob"] for t in alternatives]
    assert values == sorted(values, reverse=True)


SAMPLED = {"temperature": 0.8, "seed": 5, "logprobs": True, "top_logprobs": 20, "max_tokens": 32}


def test_sampled_speculation_gives_every_token_its_top_logprobs(engines):
    answer = chat(engines["spec"], PROMPTS[0], **SAMPLED)
    entries = answer["choices"][0]["logprobs"]["content"]
    # One entry per emitted token, accepted drafts included.
    assert answer["metrics"]["speculative_decoding"]["num_accepted_draft_tokens"] > 0
    assert len(entries) == answer["usage"]["completion_tokens"]
    assert "".join(e["token"] for e in entries) == answer["choices"][0]["message"]["content"]
    for entry in entries:
        well_formed(entry, 20)
        assert len(entry["top_logprobs"]) == 20  # raw: every token has a finite logprob


def test_processed_logprobs_are_the_distribution_the_request_samples(engines):
    raw = chat(engines["spec"], PROMPTS[0], **SAMPLED)
    processed = chat(engines["processed"], PROMPTS[0], **SAMPLED)
    raw_entries = raw["choices"][0]["logprobs"]["content"]
    entries = processed["choices"][0]["logprobs"]["content"]
    # The mode changes what is reported, never what is drawn: the same seed, the same tokens.
    assert [e["token"] for e in entries] == [e["token"] for e in raw_entries]
    assert len(entries) == processed["usage"]["completion_tokens"]
    for plain, entry in zip(raw_entries, entries, strict=True):
        well_formed(entry, 20)
        top = entry["top_logprobs"]
        assert sum(math.exp(t["logprob"]) for t in top) <= 1.0 + 1e-9
        # softmax(logits / T) of the same row: log-ratios are the raw ones divided by T.
        assert [t["token"] for t in top] == [t["token"] for t in plain["top_logprobs"]]
        first, raw_first = top[0]["logprob"], plain["top_logprobs"][0]["logprob"]
        for mine, theirs in zip(top, plain["top_logprobs"], strict=True):
            expected = (theirs["logprob"] - raw_first) / 0.8
            assert mine["logprob"] - first == pytest.approx(expected, abs=1e-6)
        expected = (plain["logprob"] - raw_first) / 0.8
        assert entry["logprob"] - first == pytest.approx(expected, abs=1e-6)


def test_processed_top_lists_leave_out_what_top_p_cuts(engines):
    url = engines["processed"]
    body = {**SAMPLED, "top_p": 0.5}
    answer = chat(url, PROMPTS[1], **body)
    entries = answer["choices"][0]["logprobs"]["content"]
    assert len(entries) == answer["usage"]["completion_tokens"]
    for entry in entries:
        top = entry["top_logprobs"]
        assert entry["token"] in [t["token"] for t in top]  # an exact sampler stays inside
        if len(top) < 20:  # the whole nucleus is listed: its probabilities sum to 1
            assert sum(math.exp(t["logprob"]) for t in top) == pytest.approx(1.0, abs=1e-6)
    assert any(len(e["top_logprobs"]) < 20 for e in entries)
    messages = {"messages": [{"role": "user", "content": PROMPTS[1]}], "stream": True}
    streamed = stream_chunks(url, {**body, **messages})
    flat = [
        e
        for c in streamed
        if c["choices"] and c["choices"][0]["logprobs"]
        for e in c["choices"][0]["logprobs"]["content"]
    ]
    assert flat == entries
    legacy = {"prompt": PROMPTS[1], "max_tokens": 12, "temperature": 0.8, "seed": 5}
    completion = httpx.post(
        f"{url}/v1/completions", json={**legacy, "logprobs": 20}, timeout=120
    ).json()
    columns = completion["choices"][0]["logprobs"]
    assert len(columns["tokens"]) == completion["usage"]["completion_tokens"] == 12
    assert all(0 < len(top) <= 20 for top in columns["top_logprobs"])
    assert all(sum(map(math.exp, top.values())) <= 1.0 + 1e-9 for top in columns["top_logprobs"])


def test_fault_injected_verifier_is_never_the_default(backend):
    assert backend.verify == "exact"
    assert backend.with_spec(SPEC).verify == "exact"
    assert backend.with_spec(SPEC, "biased-argmax").verify == "biased-argmax"
    with pytest.raises(ValueError, match="verify must be one of"):
        backend.with_spec(SPEC, "argmax")
    assert backend.logprobs_mode == backend.with_spec(SPEC).logprobs_mode == "raw"
    with pytest.raises(ValueError, match="logprobs_mode must be one of"):
        backend.with_spec(SPEC, logprobs_mode="raw_logprobs")


def test_the_kv_cache_gauge_follows_the_running_request(engines, backend):
    # The prompt and the tokens decoded so far, out of the model's context; freed at the end.
    body = {
        "messages": [{"role": "user", "content": PROMPTS[1]}],
        "max_tokens": 24,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    url = engines["plain"]
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(streamed, url, body)
        seen = []
        while not running.done():
            seen.append(kv_cache_usage(url) or 0.0)
        usage = running.result()
    held = [round(value * backend.context) for value in seen if value > 0]
    assert held, seen
    assert usage["prompt_tokens"] <= min(held) <= max(held) <= usage["total_tokens"]
    assert wait_until(lambda: kv_cache_usage(url) == 0.0, 10)
