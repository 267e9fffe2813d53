"""Benchmark `gate replay`: 100,000 recorded pairs, a look every 100 pairs.

Writes one simulated A/A rollout (no decision is ever reached, so every look is
evaluated: the worst case) as pair JSONL, then times parsing and the replay itself.

    .venv/bin/python bench/gate_replay.py [--pairs 100000] [--every 100] [--repeat 3]
        [--episodes]

`--episodes`: the pairs come in interleaved conversations of 5-20 requests, each record
naming its `episode` (issue 39).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from gate.stats.policy import Policy
from gate.stats.replay import read_pairs, replay
from gate.stats.simulated_pairs import Scenario, draw_pairs, to_records


def main() -> None:
    """Write the pairs once, then time read + replay `--repeat` times."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--episodes", action="store_true")
    args = parser.parse_args()
    policy = Policy()
    episodes = (5, 20) if args.episodes else None
    scenario = Scenario("A/A", pairs=args.pairs, episode_len=episodes)
    cols = draw_pairs(scenario, policy, 1, np.random.default_rng(0))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pairs.jsonl"
        path.write_bytes(b"\n".join(orjson.dumps(r) for r in to_records(cols, policy)))
        size_mb = path.stat().st_size / 1e6
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            records = read_pairs(path)
            t1 = time.perf_counter()
            result = replay(records, policy, every=args.every)
            t2 = time.perf_counter()
            print(
                f"pairs {len(records):,} ({size_mb:.1f} MB)  looks {result.looks:,}  "
                f"decision {result.decision.value} at {result.pairs:,}  "
                f"parse {t1 - t0:.2f} s  replay {t2 - t1:.2f} s  total {t2 - t0:.2f} s"
            )


if __name__ == "__main__":
    main()
