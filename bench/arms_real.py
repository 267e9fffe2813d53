"""Which arm leads or wins per segment, from a real multi-arm rollout's exported pairs.

Reads one or more `specgate pairs export` files of a rollout with arms (for example those
of `specgate demo --arms 2,4,8`), and replays each segment's pairs, and all of them, through
the multi-arm gate (`gate.stats.arms_replay`) under the demo's policy. Prints one markdown
row per segment: per arm its pairs, TPOT ratio to the baseline with the choice interval,
its state and acceptance length, then the leader and the winner (if any).

    python bench/arms_real.py run1/pairs.jsonl [run2/pairs.jsonl ...]

Several files are judged as one stream (their pairs in fold order, each file's times kept):
only do that for runs of the same engines and workload.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from gate.demo.run import demo_policy
from gate.stats.arms_replay import ArmsReplayResult, replay_arms
from gate.stats.policy import Policy
from gate.stats.record_columns import Record
from gate.stats.replay import read_pairs

ALL = "all"


def per_segment(records: Sequence[Record]) -> dict[str, ArmsReplayResult]:
    """Return the multi-arm replay of every segment's pairs, and of all of them."""
    segments = sorted({str(r.get("segment")) for r in records})
    policy = Policy.model_validate(demo_policy(segments))
    out = {ALL: replay_arms(records, policy, every=10)}  # looks every 10 pairs
    for segment in segments:
        mine = [r for r in records if r.get("segment") == segment]
        if any(r.get("arm") for r in mine):
            out[segment] = replay_arms(mine, policy, every=10)
    return out


def observed(records: Sequence[Record], arm: str) -> tuple[int, float | None]:
    """Return an arm's pairs with both TPOTs and their geometric-mean TPOT ratio, warm-up
    included (descriptive: the gate's own estimate leaves the warm-up out)."""
    logs = []
    for r in records:
        b, c = r.get("baseline") or {}, r.get("candidate") or {}
        if r.get("arm") == arm and (b.get("tpot_s") or 0) > 0 and (c.get("tpot_s") or 0) > 0:
            logs.append(math.log(c["tpot_s"] / b["tpot_s"]))
    return len(logs), (math.exp(sum(logs) / len(logs)) if logs else None)


def row(segment: str, got: ArmsReplayResult, records: Sequence[Record]) -> str:
    """Return one markdown row: each arm's numbers, the leader and the winner."""
    cells = []
    for arm in sorted(got.arms, key=lambda a: a.name):
        ratio = "-" if arm.ratio is None else f"{arm.ratio:.2f}"
        length = "-" if arm.acceptance.length is None else f"{arm.acceptance.length:.2f}"
        n, seen = observed(records, arm.name)
        raw = "-" if seen is None else f"{seen:.2f}"
        cells.append(f"{arm.name}: {arm.pairs} pairs, TPOT x{ratio} "
                     f"[{arm.lower:.2f}, {arm.upper:.2f}] (observed x{raw} over {n}), "
                     f"{arm.state.name.lower()}, L {length}, "
                     f"loops {arm.acceptance.looping}/{arm.acceptance.compared}")  # fmt: skip
    leader, winner = got.leader or "-", got.winner or "none"
    return f"| {segment} | {' · '.join(cells)} | {leader} | {winner} ({got.decision.value}) |"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="+", type=Path, help="exported pair files (JSONL)")
    args = parser.parse_args(argv)
    records = [r for path in args.pairs for r in read_pairs(path)]
    print("| segment | arms (pairs, TPOT ratio [choice interval], state, acceptance length, "
          "loop pairs) | leader | winner |")  # fmt: skip
    print("|---|---|---|---|")
    for segment, got in per_segment(records).items():
        mine = records if segment == ALL else [r for r in records if r.get("segment") == segment]
        print(row(segment, got, mine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
