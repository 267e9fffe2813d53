"""How often the crossover benchmark's p99 interval misses the truth when nothing differs.

Four identical modes (gamma-distributed latencies around 200 ms; in one round in ten a
host stall delays four requests of a block together by 20-150 ms) go through
`bench.crossover_stats.compare`; the true ratio of every mode's p99 to the better one's
is 1. Prints, per compared mode, how many intervals lie wholly below 1 (a `yes` too
easily) and wholly above (a `no` or `cannot tell` too easily).

    python bench/crossover_coverage.py [--runs 150] [--rounds 16] [--block 23]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.crossover_stats import compare

MODES = ("baseline", "speculative", "by-load", "control")


def latencies(rng: np.random.Generator, rounds: int, block: int) -> np.ndarray:
    """Return one mode's latencies (ms), a row per round, with the occasional stall."""
    found = 200 + rng.gamma(2, 5, size=(rounds, block))
    for row in found:
        if rng.random() < 0.1:
            row[:4] += rng.uniform(20, 150)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--block", type=int, default=23, help="requests per block")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    misses = {mode: {"below": 0, "above": 0} for mode in ("by-load", "control")}
    for run in range(args.runs):
        out = compare({m: latencies(rng, args.rounds, args.block) for m in MODES}, seed=run)
        for mode, seen in misses.items():
            low, high = out[f"{mode}_p99"]["interval"]
            seen["below"] += high < 1
            seen["above"] += low > 1
    print(f"{args.runs} A/A runs, intervals wholly below / above 1: {misses}")


if __name__ == "__main__":
    main()
