"""Record the demo's shipped pairs: `specgate demo`'s own engines on a few prompt classes.

Runs the demo (`gate.demo.run.run_demo`: the plain and the n-gram SmolLM2 engines, the
gateway in shadow mode, the collector, evaluators and the embedded gate) on the built-in
workload's prompts of `--segments`, each sent `--rounds` times, then writes the rollout's
pairs in the replay schema (`gate.stats.replay`), as `specgate pairs export` does. The
demo replays the file through the gate at its end (`gate/demo/recording.py`).

    cd "$(mktemp -d)" && python /path/to/bench/record_demo_pairs.py \
        --segments chat,json_extraction --rounds 4 --weights q4_1 \
        --out /path/to/gate/demo/data/recorded_pairs.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from gate.db.engine import engine_from_settings, session_factory
from gate.demo import run
from gate.demo.run import DemoOptions, run_demo
from gate.engines.workload import WorkloadItem, load_workload
from gate.pairs.export import pair_records
from gate.settings import Settings


def main() -> None:
    """Run the demo on the chosen prompts and write its pairs as JSONL."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segments", default="chat,json_extraction")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--weights", default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    items = load_workload(segments=args.segments.split(","))
    workload = _rounds(items, args.rounds)
    run.load_workload = lambda limit=None, **_: workload[:limit]  # type: ignore[assignment]
    settings = Settings()
    options = DemoOptions(requests=len(workload), weights=args.weights)
    result = run_demo(settings, options, Console())
    sessions = session_factory(engine_from_settings(settings))
    with sessions() as session:
        records = list(pair_records(session, rollout_id=result.rollout_id, stage=0))
    args.out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    print(f"wrote {len(records)} pairs to {args.out}")


def _rounds(items: list[WorkloadItem], rounds: int) -> list[WorkloadItem]:
    """Each prompt `rounds` times, every prompt once before any twice."""
    return [item for _ in range(rounds) for item in items]


if __name__ == "__main__":
    main()
