"""The crossover benchmark's comparison: p50/p99 ratios with intervals, an A/A floor.

Each level's requests come in rounds, each mode one block per round (of one run). The
ratio of a mode's quantile to the better of baseline-only and speculative-only is given
with a 95 % bootstrap interval that resamples whole rounds, the same rounds for every
mode: a stall of the shared host delays every request in flight at once, so requests
are not independent draws (resampling them one by one gives intervals far too narrow),
while the modes of one round met the same drift, so their ratio keeps the pairing.

The control is the better mode's configuration run again under another alias, judged
by the same formula: its ratio is what the measurement gives when nothing differs, the
noise floor that the by-load mode's ratio must be read against.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

TOLERANCE = 1.05
QUANTILES = {"p50": 50.0, "p99": 99.0}
RESAMPLES = 2000
SHOWN = ("baseline", "speculative", "by-load")


def resampled(rounds: np.ndarray, q: float, picks: np.ndarray) -> np.ndarray:
    """Return the `q` percentile of each resample of whole rounds.

    Args:
        rounds: one mode's latencies, one row per round (its block), equal block sizes.
        q: the percentile, 0-100.
        picks: the rounds drawn, one row per resample (the same rows for every mode).

    Returns:
        One percentile per resample.
    """
    found: np.ndarray = np.percentile(rounds[picks].reshape(len(picks), -1), q, axis=1)
    return found


def verdict(low: float, high: float) -> str:
    """Return whether a ratio's interval shows it within the tolerance, beyond, or neither."""
    if high <= TOLERANCE:
        return "yes"
    if low > TOLERANCE:
        return "no"
    return "cannot tell"


def compare(blocks: dict[str, np.ndarray], seed: int = 0) -> dict[str, Any]:
    """Return each quantile's by-load and control ratios to the better of the two modes.

    Args:
        blocks: per mode (`baseline`, `speculative`, `by-load`, `control`), its latencies
            with one row per round (the same rounds, in the same order, for every mode).
        seed: the bootstrap's seed.

    Returns:
        Per mode its p50/p99 in ms; per quantile and compared mode the point ratio, its
        95 % interval and the verdict against TOLERANCE.
    """
    rng = np.random.default_rng(seed)
    count = len(blocks["baseline"])
    picks = rng.integers(0, count, size=(RESAMPLES, count))
    out: dict[str, Any] = {}
    for mode, found in blocks.items():
        values = found.ravel()
        out[mode] = {
            f"{q}_ms": round(float(np.percentile(values, p)), 1) for q, p in QUANTILES.items()
        }
    for q, p in QUANTILES.items():
        boot = {mode: resampled(found, p, picks) for mode, found in blocks.items()}
        better = np.minimum(boot["baseline"], boot["speculative"])
        point_better = min(out["baseline"][f"{q}_ms"], out["speculative"][f"{q}_ms"])
        for mode in ("by-load", "control"):
            ratios = boot[mode] / better
            low, high = (float(x) for x in np.percentile(ratios, [2.5, 97.5]))
            out[f"{mode}_{q}"] = {
                "ratio": round(out[mode][f"{q}_ms"] / point_better, 3),
                "interval": [round(low, 3), round(high, 3)],
                "within": verdict(low, high),
            }
    return out


def table(rows: Iterable[dict[str, Any]]) -> str:
    """Return the per-level Markdown table: quantiles, ratios with intervals, routing."""
    lines = [
        "| L | n | baseline p50/p99 | speculative p50/p99 | by-load p50/p99 | by-load/better p50"
        " | by-load/better p99 [95 %] | within 5 % | control/better p99 [95 %] (A/A) | to spec |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [
            f"{row[m]['p50_ms']:.0f} / {row[m]['p99_ms']:.0f}"
            for m in ("baseline", "speculative", "by-load")
        ]
        b50, b99, c99 = row["by-load_p50"], row["by-load_p99"], row["control_p99"]
        lines.append(
            f"| {row['level']} | {row['n']} | {' | '.join(cells)} | {b50['ratio']:.3f}"
            f" | {b99['ratio']:.3f} [{b99['interval'][0]:.2f}, {b99['interval'][1]:.2f}]"
            f" | {b99['within']} | {c99['ratio']:.3f} [{c99['interval'][0]:.2f},"
            f" {c99['interval'][1]:.2f}] | {row['to_speculative']:.2f} |"
        )
    return "\n".join(lines)
