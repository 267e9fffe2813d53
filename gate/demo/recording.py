"""The demo's closing decision: a shipped recording of real pairs, replayed through the gate.

The live part of `specgate demo` runs too few pairs for the gate to decide. The recording
(`data/recorded_pairs.jsonl`, the replay schema of `gate.stats.replay`) holds real pairs
from the demo's own engines, recorded by `bench/record_demo_pairs.py`; replaying it with
the demo's policy, a look after every pair, shows where the real gate decides and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path

import yaml

from gate.demo.run import demo_policy
from gate.reports.headline.cells import format_estimate, format_interval, label
from gate.reports.headline.facts import Cell
from gate.reports.headline.reasons import reason_sentences
from gate.stats.policy import load_policy
from gate.stats.replay import read_pairs, replay
from gate.stats.verdict import VerdictResult

RECORDING = "recorded_pairs.jsonl"
# What the recording is, as `bench/record_demo_pairs.py` made it (its module docstring).
RECORDED_WITH = (
    "SmolLM2-135M on llama.cpp, shipped Q4_1 weights, plain vs n-gram k = 8, "
    "the workload's chat and json_extraction prompts, 2-core shared host"
)


@dataclass(frozen=True)
class RecordingReplay:
    """Where the gate decided on the recording, and why."""

    decision: str
    pairs: int  # the pair the decision came at (the last one when none was decisive)
    total_pairs: int
    decisive: bool
    recorded_on: str  # UTC date of the first recorded pair
    reasons: tuple[str, ...]
    reason_codes: tuple[str, ...]

    def line(self) -> str:
        """Return the one line the demo ends with."""
        where = f"at pair {self.pairs}" if self.decisive else f"no decision in {self.pairs} pairs"
        return (
            f"Replayed recording (real pairs from these engines, recorded {self.recorded_on}): "
            f"{self.decision.upper()} {where} of {self.total_pairs}: "
            + " ".join([*self.reasons, f"(Recorded with {RECORDED_WITH}.)"])
        )


def replay_recording(path: Path | None = None) -> RecordingReplay:
    """Replay the shipped recording (or `path`) with the demo's policy, looking every pair."""
    if path is None:
        with resources.as_file(resources.files("gate.demo").joinpath("data", RECORDING)) as p:
            records = read_pairs(p)
    else:
        records = read_pairs(path)
    policy = load_policy(yaml.safe_dump(demo_policy(sorted({r["segment"] for r in records}))))
    result = replay(records, policy, every=1)
    codes = result.verdict.reason_codes
    return RecordingReplay(
        decision=result.decision.value,
        pairs=result.pairs,
        total_pairs=result.total_pairs,
        decisive=result.decisive,
        recorded_on=_date(min(str(r["created_at"]) for r in records)),
        reasons=(*reason_sentences(codes, policy), *_cell_sentences(result.verdict)),
        reason_codes=codes,
    )


def _cell_sentences(verdict: VerdictResult) -> list[str]:
    """Say each deciding cell's estimate and interval, as the headline does."""
    cells = [Cell.from_json(row) for row in verdict.estimates()]
    codes = set(verdict.reason_codes)
    return [
        f"{label(c.metric)} ({c.segment}): {format_estimate(c)} (95 % CI {format_interval(c)}), "
        f"{c.n} pairs."
        for c in cells
        if f"{verdict.decision.value}:{c.metric}:{c.segment}" in codes
    ]


def _date(stamp: str) -> str:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).date().isoformat()
