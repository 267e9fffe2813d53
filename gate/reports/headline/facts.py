"""The input: a verdict as the gate stores it, and the stage's pace, read into typed values.

Cells read as the gate writes them (`gate.stats.verdict.CellResult`): latency metrics as
candidate/baseline ratios, rates as candidate minus baseline, acceptance as the mean
per-request acceptance. `lower` is the bound at the kill level, `upper` at promotion's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Cell:
    """One metric x segment of a stored verdict."""

    metric: str
    segment: str
    estimate: float | None
    lower: float | None
    upper: float | None
    n: int
    kill_at: float | None
    margin: float | None
    status: str

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Cell:
        """Read one entry of a verdict's `estimates`."""
        return cls(
            metric=str(row["metric"]),
            segment=str(row["segment"]),
            estimate=_num(row.get("estimate")),
            lower=_num(row.get("lower")),
            upper=_num(row.get("upper")),
            n=int(row.get("n") or 0),
            kill_at=_num(row.get("kill_at")),
            margin=_num(row.get("margin")),
            status=str(row.get("status") or "idle"),
        )


@dataclass(frozen=True)
class Facts:
    """A verdict as stored: what the headline is built from."""

    decision: str
    reason_codes: tuple[str, ...]
    cells: tuple[Cell, ...]
    n_pairs: int
    # Pairs left out as not load-matched (promoted and routed by load).
    unmatched: int = 0
    # Episodes among the tested pairs (None: none held two pairs, or not recorded).
    episodes: int | None = None
    # A rollout with several candidates: the best-arm choice as stored (`verdicts.arms`).
    arms: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, verdict: Any) -> Facts:
        """Read a verdict row, a `VerdictResult` or its JSON (a mapping)."""
        get = verdict.get if isinstance(verdict, Mapping) else lambda k: getattr(verdict, k)
        decision = get("decision")
        rows: Any = get("estimates") if _has(verdict, "estimates") else None
        if callable(rows):  # a `VerdictResult`: its JSON-ready table
            rows = rows()
        return cls(
            decision=str(getattr(decision, "value", decision)),
            reason_codes=tuple(get("reason_codes") or ()),
            cells=tuple(Cell.from_json(r) for r in (rows or [])),
            n_pairs=int(get("n_pairs") or 0),
            unmatched=int((get("unmatched") if _has(verdict, "unmatched") else 0) or 0),
            episodes=_episodes(verdict, get),
            arms=(get("arms") if _has(verdict, "arms") else None) or None,
        )


@dataclass(frozen=True)
class Pace:
    """How fast the stage gathers evaluated pairs: seen so far, over how long."""

    pairs: int
    elapsed_s: float

    @property
    def per_second(self) -> float | None:
        """Return pairs per second, or None before there is a rate."""
        return self.pairs / self.elapsed_s if self.pairs and self.elapsed_s > 0 else None


def _has(verdict: Any, key: str) -> bool:
    return key in verdict if isinstance(verdict, Mapping) else hasattr(verdict, key)


def _num(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _episodes(verdict: Any, get: Any) -> int | None:
    """Return a verdict's episodes: a row's `episodes`, a result's `n_episodes`."""
    for key in ("episodes", "n_episodes"):
        if _has(verdict, key) and get(key) is not None:
            return int(get(key))
    return None
