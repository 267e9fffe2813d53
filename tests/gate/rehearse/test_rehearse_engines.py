"""`specgate rehearse`'s exactness phase against real local engines (SmolLM2 on transformers,
one process each): an exact speculative candidate passes, a lossy one exits 3.

The lossy candidate verifies its drafts without the request's top_p (`--verify
ignore-top-p`): at top_p 0.5 it emits tokens the request cuts, which the test proves
within a few answers. `biased-argmax` is lossy too, but on SmolLM2's n-gram drafts its
per-token TV is about 0.01 to 0.03 (its drafts are mostly near-certain copies), which
takes thousands of tokens to prove: more than a test may spend on two shared cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest

from gate.stats.policy import Policy
from tests.gate.engines.conftest import (  # noqa: F401 (fixtures)
    gguf,
    start_engine,
    stop_engine,
    transformers_ready,
)

PROMPT = (
    "Here is a list of words: apple, pear, plum, fig, kiwi, lime, date, peach, grape, melon, "
    "lemon, mango, cherry, berry, olive. Write these words again, in any order you like, "
    "separated by commas."
)
BODY = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 48, "top_p": 0.5}
ENGINE = ("--backend", "transformers", "--logprobs-mode", "processed")
SPEC = (*ENGINE, "--speculative", "ngram", "--prompt-lookup-min", "1", "--prompt-lookup-max", "2")


@pytest.fixture(scope="module")
def engines(transformers_ready: Path) -> Iterator[dict[str, str]]:  # noqa: F811
    """A plain engine and two speculative ones: the exact verifier and a lossy one."""
    kinds = {"plain": ENGINE, "exact": SPEC, "lossy": (*SPEC, "--verify", "ignore-top-p")}
    # Started together: each spends most of its start-up loading weights.
    with ThreadPoolExecutor(len(kinds)) as pool:
        futures = {name: pool.submit(start_engine, *args, wait_s=300) for name, args in
                   kinds.items()}  # fmt: skip
    started = {name: f.result() for name, f in futures.items() if f.exception() is None}
    try:
        for future in futures.values():
            future.result()  # a start that failed fails the test, once the others are stopped
        yield {name: url for name, (_, url) in started.items()}
    finally:
        for process, _ in started.values():
            stop_engine(process)


def rehearse(tmp_path: Path, baseline: str, candidate: str) -> tuple[int, dict, str]:
    workload = tmp_path / "w.jsonl"
    workload.write_text(orjson.dumps(BODY).decode() + "\n")
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "gate", "rehearse", "--baseline", f"{baseline}/v1",
        "--candidate", f"{candidate}/v1", "--workload", str(workload), "--out", str(out),
        "--max", "1", "--min-requests", "2", "--max-requests", "2", "--max-tokens", "4",
        "--budget", "120s", "--exactness-requests", "10", "--parity-requests", "1",
        "--exactness-max-tokens", "48", "--logprobs-mode", "processed", "--json",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ})
    return done.returncode, json.loads(done.stdout), done.stderr


def test_an_exact_candidate_passes_the_exactness_phase(engines, tmp_path) -> None:
    code, summary, err = rehearse(tmp_path, engines["plain"], engines["exact"])
    assert code == 2, err  # no --at: the sweep could not tell; exactness did not fail it
    section = summary["exactness"]
    assert section["candidate"]["status"] == "exact" and section["candidate"]["cut"] == 0
    margin = Policy().guardrails.exactness.margin_tv
    assert section["candidate"]["text"].startswith(f"exact: no deviation beyond TV {margin:g} over")
    assert section["baseline"]["status"] == "exact" and not section["control_alarm"]
    assert section["failed"] is False and section["greedy_parity"]["compared"] == 1
    assert "## Exactness" in (tmp_path / "out" / "rehearsal.md").read_text()


def test_a_lossy_candidate_fails_with_exit_3(engines, tmp_path) -> None:
    code, summary, err = rehearse(tmp_path, engines["plain"], engines["lossy"])
    assert code == 3, err
    section = summary["exactness"]
    assert section["candidate"]["status"] == "deviates" and section["failed"] is True
    assert section["candidate"]["text"].startswith("the candidate's tokens are not distributed")
    assert section["baseline"]["status"] == "exact" and not section["control_alarm"]
    assert "the candidate is not exact: exit 3" in err
