"""llama.cpp engines with parallel slots: requests decode at once, each keeps its own
speculative counts, and `specgate rehearse` sweeps the two local engines."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gate.cli import main
from gate.engines.local import build_backend
from gate.errors import ConfigError
from tests.gate.engines.conftest import start_engine, stop_engine
from tests.waits import wait_until

SLOTS = ["--backend", "llamacpp", "--parallel", "2"]
COPY = "Repeat this sentence exactly: the cat sat on the mat and looked at the red door."


@pytest.fixture(scope="module")
def parallel_engines(llamacpp_ready: Path) -> Iterator[dict[str, str]]:
    plain, plain_url = start_engine(*SLOTS)
    try:
        spec, spec_url = start_engine(*SLOTS, "--speculative", "ngram")
    except BaseException:
        stop_engine(plain)
        raise
    yield {"plain": plain_url, "spec": spec_url}
    stop_engine(spec)
    stop_engine(plain)


def running(url: str) -> float:
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            if sample.name == "vllm:num_requests_running":
                return sample.value
    return 0.0


def test_two_slots_decode_two_requests_at_once_each_with_its_own_counts(parallel_engines):
    url = parallel_engines["spec"]
    answers: list[dict] = []
    body = {"messages": [{"role": "user", "content": COPY}], "max_tokens": 48, "temperature": 0}

    def ask() -> None:
        response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=180)
        answers.append(response.json())

    threads = [threading.Thread(target=ask) for _ in range(2)]
    peak = [0.0]
    for thread in threads:
        thread.start()
    wait_until(lambda: peak.__setitem__(0, max(peak[0], running(url))) or peak[0] >= 2, 120)
    for thread in threads:
        thread.join(timeout=180)
    assert peak[0] == 2  # both in a slot at once, none queued behind the other
    assert len(answers) == 2
    for answer in answers:
        spec = answer["metrics"]["speculative_decoding"]
        # Each request's own counts (from its timings), not both requests' summed counters.
        assert 0 < spec["num_draft_tokens"] <= answer["usage"]["completion_tokens"] * 8
        assert 0 <= spec["num_accepted_draft_tokens"] <= spec["num_draft_tokens"]
    assert (
        answers[0]["metrics"]["speculative_decoding"]
        == (answers[1]["metrics"]["speculative_decoding"])
    )  # the same greedy request drafts and accepts alike


def test_a_rehearsal_sweeps_the_two_local_engines(parallel_engines, tmp_path, capsys):
    out = tmp_path / "rehearsal"
    sys.argv = [
        "specgate",
        "rehearse",
        "--baseline",
        f"{parallel_engines['plain']}/v1",
        "--candidate",
        f"{parallel_engines['spec']}/v1",
        "--segment",
        "proofread",
        "--max",
        "2",
        "--max-tokens",
        "16",
        "--budget",
        "40s",
        "--min-requests",
        "4",
        "--max-requests",
        "4",
        "--out",
        str(out),
    ]
    with pytest.raises(SystemExit) as exited:
        main()
    err = capsys.readouterr().err
    assert exited.value.code == 2, err  # no --at: a report, not a decision
    summary = json.loads((out / "rehearsal.json").read_text())
    assert [row["concurrency"] for row in summary["levels"]] == [1, 2]
    for row in summary["levels"]:
        cell = row["segments"]["proofread"]
        assert cell["baseline"]["errors"] == cell["candidate"]["errors"] == 0
        assert cell["candidate"]["acceptance"] is not None and cell["speedup"] is not None
        assert cell["baseline"]["acceptance"] is None


def test_parallel_slots_need_llamacpp():
    with pytest.raises(ConfigError, match="--parallel needs the llamacpp backend"):
        build_backend("transformers", spec=None, parallel=2)
    with pytest.raises(ConfigError, match="--parallel must be at least 1"):
        build_backend("llamacpp", spec=None, parallel=0)
