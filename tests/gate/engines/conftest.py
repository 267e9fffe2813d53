"""Real local engines for tests: SmolLM2 on llama.cpp (separate processes) and transformers.

A missing engine dependency fails the test with the command that installs it: these tests
never skip, so CI cannot pass without having run them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gate.engines.model import (
    LLAMACPP_INSTALL,
    MODEL_INSTALL,
    TRANSFORMERS_INSTALL,
    find_gguf,
)
from gate.engines.weights import weights_path
from gate.errors import ConfigError
from tests.servers import closed_port


def require_modules(install: str, *modules: str) -> None:
    """Fail (never skip) when an engine dependency is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: run `{install}`", pytrace=False)


@pytest.fixture(scope="session")
def gguf() -> Path:
    try:
        return find_gguf()
    except ConfigError as exc:
        pytest.fail(f"{exc.message} (CI: `{MODEL_INSTALL}`)", pytrace=False)


@pytest.fixture(scope="session")
def llamacpp_ready(gguf: Path, model_cache: None) -> Path:
    """The llama.cpp engines' default weights, made before an engine's start clock runs."""
    require_modules(LLAMACPP_INSTALL, "xllamacpp", "gguf")
    return weights_path("q8_0")


@pytest.fixture(scope="session")
def transformers_ready(gguf: Path) -> Path:
    require_modules(TRANSFORMERS_INSTALL, "torch", "transformers", "gguf", "accelerate")
    return gguf


def start_engine(*args: str, wait_s: float = 60) -> tuple[subprocess.Popen[bytes], str]:
    """Start `specgate engine` in its own process; return it and its base URL once healthy."""
    port = closed_port()
    command = [sys.executable, "-m", "gate", "engine", "--port", str(port), *args]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ}
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = process.stderr.read().decode() if process.stderr else ""
            pytest.fail(f"engine {args} exited: {error[-2000:]}", pytrace=False)
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    pytest.fail(f"engine {args} did not start in {wait_s:g} s", pytrace=False)


def kv_cache_usage(url: str) -> float | None:
    """Return the engine's `vllm:kv_cache_usage_perc` gauge, None when it has none."""
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=5).text):
        if family.name == "vllm:kv_cache_usage_perc":
            assert family.type == "gauge"
            (sample,) = family.samples
            return sample.value
    return None


def streamed(url: str, body: dict) -> dict:
    """Stream one chat completion; return its usage."""
    usage: dict = {}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage") or usage
    return usage


def stop_engine(process: subprocess.Popen[bytes]) -> None:
    """Stop an engine process started by `start_engine`."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def llamacpp_engines(llamacpp_ready: Path) -> Iterator[dict[str, str]]:
    """A plain and an n-gram speculative llama.cpp engine, one process each."""
    plain, plain_url = start_engine("--backend", "llamacpp")
    try:
        spec, spec_url = start_engine("--backend", "llamacpp", "--speculative", "ngram")
    except BaseException:
        stop_engine(plain)
        raise
    yield {"plain": plain_url, "spec": spec_url}
    stop_engine(spec)
    stop_engine(plain)
