"""Power of the acceptance floor test: pairs until a draft below its floor is killed.

Simulated rollouts (`gate.stats.simulate`, shadow mode, default policy: floor 0.2, five
declared segments, 200 warm-up pairs, first stage's share of alpha_kill) whose candidate
acceptance is below the floor from the first pair: per-request acceptance ~ Beta with
mean `--mean` and concentration 10 (Beta(1, 9) at mean 0.1), in every segment. The
collapse detector compares with the warm-up's own level, so it stays quiet: only the floor
test (pooled and per segment) can kill. The gate looks every `--every` pairs up to
`--pairs`; the table gives the share killed by the floor and the pairs it took.

    python bench/acceptance_floor.py --runs 400 --seed 5 [--mean 0.1 0.15] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from typing import Any

import numpy as np

from gate.stats.cumulative import looks_every, to_stats
from gate.stats.policy import Policy, at_stage
from gate.stats.rule import apply_rule
from gate.stats.simulate import clopper_pearson
from gate.stats.simulated_pairs import Scenario, draw_pairs

CONCENTRATION = 10.0


def pairs_to_kill(mean: float, runs: int, pairs: int, every: int, seed: int) -> np.ndarray:
    """Return, per run, the pairs at the floor test's first kill (NaN: never)."""
    policy = at_stage(Policy(), 0)
    rng = np.random.default_rng(seed)
    cols = draw_pairs(Scenario("floor", pairs=pairs, every=every), policy, runs, rng)
    low = rng.beta(CONCENTRATION * mean, CONCENTRATION * (1 - mean), cols.acceptance.shape)
    cols = replace(cols, acceptance=low)
    looks = looks_every(pairs, every)
    flags = apply_rule(policy, to_stats(cols, policy, looks))
    floor = np.zeros((runs, looks.size), dtype=bool)
    for (metric, _), hit in flags.harmful.items():
        if metric == "acceptance":
            floor |= np.broadcast_to(hit, floor.shape)
    return np.where(floor.any(axis=-1), looks[floor.argmax(axis=-1)], np.nan)


def summary(at: np.ndarray, pairs: int) -> dict[str, Any]:
    """Return the kill share with its 95% CP interval and pairs-to-kill quantiles."""
    hit = at[np.isfinite(at)]
    rate, lo, hi = clopper_pearson(int(hit.size), int(at.size))
    quantiles = np.percentile(hit, [10, 50, 90]).tolist() if hit.size else [None] * 3
    return {"killed": rate, "cp95": [lo, hi], "p10_p50_p90": quantiles, "within": pairs}


def main() -> None:
    """Print the table (and write JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--mean", type=float, nargs="+", default=[0.1, 0.15])
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    t0 = time.perf_counter()
    rows = []
    for mean in args.mean:
        at = pairs_to_kill(mean, args.runs, args.pairs, args.every, args.seed)
        row = {"mean": mean, "runs": args.runs, **summary(at, args.pairs)}
        rows.append(row)
        q = row["p10_p50_p90"]
        print(
            f"acceptance mean {mean:.2f} (floor 0.20): killed {row['killed']:.4f} "
            f"[{row['cp95'][0]:.4f}, {row['cp95'][1]:.4f}] within {args.pairs}; "
            f"pairs to kill p10 / p50 / p90 {q}"
        )
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
