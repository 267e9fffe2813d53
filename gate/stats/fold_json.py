"""The fold state's stored JSON documents (`gate_folds`): `dump` writes them, `load_*` read them.

JSONB has no infinities: the collapse statistic's -inf is stored as null and read back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np

from gate.stats.change import CollapseState
from gate.stats.exactness import TokenBins
from gate.stats.gate_stats import CellStats
from gate.stats.incremental import BandSums, Bucket, Tail, WarmUp, folded, zero
from gate.stats.registry import Family, metric_id
from gate.stats.sequences import CountStats, MeanStats, PairedCounts, TwoCounts


def dump(value: Any) -> Any:
    """Return a JSON-ready copy of state parts (dataclasses, maps, floats; -inf as null)."""
    if isinstance(value, Bucket):
        parts = {"live": value.live, "dropped": value.dropped, "both_failed": value.both_failed}
        parts["unmatched"] = value.unmatched
        return {**parts, "cells": dump(value.cells)}
    if isinstance(value, TokenBins):
        bins = [float(b) for b in value.bins]
        return {"n": float(value.n), "cut": float(value.cut), "bins": bins,
                "off": float(value.off), "off_p": float(value.off_p),
                "off_p2": float(value.off_p2)}  # fmt: skip
    if is_dataclass(value) and not isinstance(value, type):
        return dump(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): dump(v) for k, v in value.items()}
    if isinstance(value, float | np.floating) and not np.isfinite(value):
        return None  # JSONB has no infinities; only the collapse statistic's -inf occurs
    return float(value) if isinstance(value, np.floating) else value


def _number(raw: float | None) -> float:
    return -np.inf if raw is None else float(raw)


def _numbers(doc: Mapping[str, Any]) -> dict[str, float]:
    return {key: float(value) for key, value in doc.items()}


def load_buckets(doc: Mapping[str, Any] | None) -> dict[str, Bucket]:
    """Return buckets from their `dump`; absent cells are empty."""
    families = {g.id: g.shadow for g in folded()}
    out = {}
    for segment, raw in (doc or {}).items():
        cells = {
            name: _load_cell(families.get(metric_id(name).guardrail), value)
            for name, value in raw.get("cells", {}).items()
        }
        unmatched = raw.get("unmatched", 0.0)
        out[segment] = Bucket(
            raw["live"], raw["dropped"], raw["both_failed"], cells, unmatched=unmatched
        )
    return out


def _load_cell(family: Family | None, raw: Mapping[str, Any]) -> CellStats:
    kind = type(zero(family))
    if kind is TokenBins:
        return _load_bins(raw)
    if kind is TwoCounts:
        return TwoCounts(*(CountStats(**_numbers(raw[side])) for side in ("baseline", "candidate")))
    return kind(**_numbers(raw))  # type: ignore[arg-type]


def load_evaluators(doc: Mapping[str, Any] | None) -> dict[str, dict[str, PairedCounts]]:
    """Return evaluator counts from their `dump`."""
    return {
        name: {segment: PairedCounts(**_numbers(raw)) for segment, raw in per.items()}
        for name, per in (doc or {}).items()
    }


def load_collapse(doc: Mapping[str, Any] | None) -> dict[str, CollapseState]:
    """Return the collapse detectors from their `dump`."""
    return {
        segment: CollapseState(int(raw["n"]), _number(raw["log_sr"]), _number(raw["max_log_sr"]))
        for segment, raw in (doc or {}).items()
    }


def load_control(doc: Mapping[str, Any] | None) -> dict[str, CellStats]:
    """Return the control cells from their `dump`."""
    return {
        metric: _load_bins(raw) if "bins" in raw else MeanStats(**_numbers(raw))
        for metric, raw in (doc or {}).items()
    }


def _load_bins(raw: Mapping[str, Any]) -> TokenBins:
    bins = tuple(float(b) for b in raw["bins"])
    # Dumped before the most-likely test's sums: 0 and 0, its capital unmoved.
    off, off_p, off_p2 = (float(raw.get(k, 0.0)) for k in ("off", "off_p", "off_p2"))
    return TokenBins(float(raw["n"]), float(raw["cut"]), bins, off, off_p, off_p2)


def load_bands(doc: list[Any] | None) -> tuple[BandSums, ...]:
    """Return the load bands' sums from their `dump` (none folded: empty)."""
    return tuple(
        BandSums(
            MeanStats(**_numbers(raw["gain"])),
            float(raw["candidate_load"]),
            float(raw["baseline_load"]),
        )
        for raw in doc or []
    )


def load_warmup(doc: Mapping[str, Any] | None) -> WarmUp | None:
    """Return what the warm-up fixed, from its `dump` (None before the warm-up ended)."""
    if doc is None:
        return None

    def tail(raw: Mapping[str, Any]) -> Tail:
        pooled = raw["pooled"]
        return Tail(_numbers(raw["segments"]), None if pooled is None else float(pooled))

    tails = {name: tail(raw) for name, raw in doc.get("tails", {}).items()}
    scales = _numbers(doc.get("parity", {}))
    return WarmUp(tail(doc["ttft"]), tail(doc["e2e"]), _numbers(doc["levels"]), tails, scales)
