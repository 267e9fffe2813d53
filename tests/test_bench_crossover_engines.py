"""bench/crossover_engines.py refuses a reused rehearsal the gateway would not route by."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from bench.crossover_engines import check_fresh, proven_win
from gate.stats.policy_sections import Promotion

RECORDED = Path(__file__).resolve().parents[1] / (
    "bench/results/crossover-engines-2026-11-29-rehearsal/rehearsal.json"
)


def test_a_rehearsal_older_than_the_crossover_max_age_is_refused() -> None:
    document = json.loads(RECORDED.read_text())
    run_at = datetime.fromisoformat(document["run_at"])
    max_age = timedelta(seconds=Promotion().crossover_max_age_s)
    check_fresh(document, run_at + max_age - timedelta(minutes=1))
    with pytest.raises(SystemExit, match="crossover_max_age_s"):
        check_fresh(document, run_at + max_age + timedelta(minutes=1))
    assert proven_win(document) == 0  # "at or below 2 (no level proven to win)": C = 0
