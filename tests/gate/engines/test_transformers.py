"""The transformers reference backend: speculative greedy output equals plain, token for token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gate.engines.base import GenRequest
from gate.engines.decode import Sampler, decode_steps
from gate.engines.ngram import NgramDrafter
from gate.engines.server import create_engine_app
from gate.engines.spec import NgramConfig, SpecStats
from tests.servers import serving

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
    with (
        serving(create_engine_app(lambda: backend, model="smol")) as plain_url,
        serving(create_engine_app(lambda: speculative, model="smol")) as spec_url,
    ):
        yield {"plain": plain_url, "spec": spec_url}


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
