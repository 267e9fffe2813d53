"""Speculate below the crossover on the local engines, with creative prompts (issue 41).

Two `specgate engine`s serve SmolLM2-135M on llama.cpp, each pinned to a CPU of its own
with `--parallel` slots (8): `plain`, and n-gram speculative `ngram`. First a real
`specgate rehearse` of the two, over the built-in workload's creative segment, is recorded
as the by-load rollout's rehearsal (or `--rehearsal FILE`, a `rehearsal.json` recorded
before and younger than `promotion.crossover_max_age_s`, is used): its crossover is the
one the gateway routes by. Then `bench/crossover.py`'s sweep runs through the real
gateway with the creative prompts (non-streamed, their `max_tokens` capped):
baseline-only, speculative-only, by-load, and the A/A control, which is the rehearsal's
better mode at the level run again under its own alias (speculative at
or below the crossover's proven win C, else the baseline). The table, the intervals and
`--report` are `bench/crossover.py`'s. The engine that answered a request is the reply's
model; its running requests at the arrival are the block's requests to it that were in
flight then, seen from the client (the arrival included).

    python bench/crossover_engines.py [--levels 1,2,3,4,6,8] [--requests 96] [--rounds 8]
        [--max-tokens 64] [--rehearsal rehearsal.json] [--keep-rehearsal DIR]
        [--json rows.json] [--raw requests.json.gz]
    python bench/crossover_engines.py --report a.json.gz b.json.gz --crossover C
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.crossover import Sweep, load_raw, run_sweep, seed, summarize
from bench.crossover_stats import table
from bench.engines import start
from gate.db.models import Rehearsal
from gate.engines.workload import load_workload
from gate.routing.crossover import REHEARSAL, ByLoad, from_rehearsal
from gate.stats.ids import ALL
from gate.stats.policy_sections import Promotion

SEGMENT = "creative"
SERVED = {"base": "plain", "spec": "ngram"}


def creative_bodies(max_tokens: int) -> tuple[dict[str, Any], ...]:
    """Return the built-in workload's creative requests, `max_tokens` capped."""
    found = tuple(
        {**item.body, "max_tokens": min(int(item.body.get("max_tokens", max_tokens)), max_tokens)}
        for item in load_workload(segments=[SEGMENT])
    )
    if not found:
        raise SystemExit(f"no {SEGMENT} request in the built-in workload")
    return found


def engine_tag(reply: dict[str, Any]) -> tuple[str, int | None]:
    """Return which engine answered (by the model it serves); its load is the block's."""
    return {served: route for route, served in SERVED.items()}[reply["model"]], None


def sweep_for(proven: int, max_tokens: int) -> Sweep:
    """Return the sweep of creative prompts whose control follows the crossover C."""

    def better(level: int) -> str:
        return "speculative" if level <= proven else "baseline"

    return Sweep(
        bodies=creative_bodies(max_tokens),
        tag=engine_tag,
        control=lambda level: better(level) + "-again",
        better=better,
        timeout_s=600.0,
        deadline_s=5400.0,
    )


def routed_by(document: dict[str, Any], now: datetime) -> tuple[str, int]:
    """Return what the gateway routes the creative segment by with this rehearsal recorded
    on a rollout of one candidate: the source (`rehearsal`, or `stale` past the default
    `promotion.crossover_max_age_s`) and the crossover C (0: never the candidate). Read
    by the gateway's own rule (`gate.routing.crossover`), not a copy of it."""
    run_at = datetime.fromisoformat(str(document.get("run_at")))
    row = Rehearsal(summary=document, run_at=run_at, recorded_at=now)
    by_load = ByLoad(hysteresis=1, max_age_s=Promotion().crossover_max_age_s,
                     crossover=from_rehearsal(row))  # fmt: skip
    source, levels = by_load.effective(now.timestamp())
    return source, levels.get(SEGMENT, levels[ALL])


def check_fresh(document: dict[str, Any], now: datetime) -> None:
    """Refuse a rehearsal the gateway would not route by (stale or naming no crossover):
    by-load would send every request to the baseline whatever the file says."""
    source, _ = routed_by(document, now)
    if source != REHEARSAL:
        raise SystemExit(
            f"--rehearsal is {source} for the gateway (promotion.crossover_max_age_s: "
            f"{Promotion().crossover_max_age_s:.0f} s); rehearse again"
        )


def proven_win(document: dict[str, Any]) -> int:
    """Return the crossover C the gateway routes the creative segment by (0: none)."""
    return routed_by(document, datetime.fromisoformat(str(document.get("run_at"))))[1]


class Engines:
    """The two engines, started once, and the rehearsal recorded for the by-load rollout."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.urls: dict[str, str] = {}
        self.sweep: Sweep | None = None
        self.document: dict[str, Any] = (
            json.loads(args.rehearsal.read_text()) if args.rehearsal else {}
        )

    def start(self, ports: dict[str, int]) -> list[subprocess.Popen[bytes]]:
        """Start both engines; point `ports` at them."""
        procs = []
        for number, (route, served) in enumerate(SERVED.items()):
            extra = f"--parallel {self.args.parallel} --served-model-name {served}"
            proc, url = start("llamacpp", route == "spec", str(number), engine_args=extra)
            procs.append(proc)
            self.urls[route] = url
            ports[route] = int(url.rsplit(":", 1)[1])
        return procs

    def prepare(self, db: str, ports: dict[str, int]) -> Sweep:
        """Seed the rollouts, record the rehearsal as the by-load rollout's, and return
        the sweep whose control follows its crossover."""
        if self.document:
            check_fresh(self.document, datetime.now(UTC))
        rollout = seed(db, ports["base"], ports["spec"], models=(SERVED["base"], SERVED["spec"]),
                       recorded=self.document or {})  # fmt: skip
        if not self.document:
            self.document = self.rehearse(db, rollout)
        proven = proven_win(self.document)
        print(f"crossover: {json.dumps(self.document.get('crossover'))}; "
              f"{SEGMENT}: proven win C = {proven}", flush=True)  # fmt: skip
        self.sweep = sweep_for(proven, self.args.max_tokens)
        return self.sweep

    def rehearse(self, db: str, rollout: int) -> dict[str, Any]:
        """Run `specgate rehearse` over the creative segment, recorded for `rollout`."""
        out = Path(tempfile.mkdtemp(prefix="rehearsal-"))
        command = [
            sys.executable, "-m", "gate", "rehearse",
            "--baseline", self.urls["base"] + "/v1", "--candidate", self.urls["spec"] + "/v1",
            "--segment", SEGMENT, "--max", str(max(self.levels())),
            "--max-tokens", str(self.args.max_tokens), "--budget", self.args.rehearsal_budget,
            "--exactness-requests", "0", "--parity-requests", "0",
            "--out", str(out), "--rollout", str(rollout), "--database-url", db,
        ]  # fmt: skip
        print("rehearse:", " ".join(command[3:]), flush=True)
        code = subprocess.run(command, timeout=3600).returncode
        if code == 4 or not (out / "rehearsal.json").exists():
            raise SystemExit(f"specgate rehearse failed (exit {code})")
        if self.args.keep_rehearsal:
            shutil.copytree(out, self.args.keep_rehearsal, dirs_exist_ok=True)
        document: dict[str, Any] = json.loads((out / "rehearsal.json").read_text())
        return document

    def levels(self) -> list[int]:
        return [int(x) for x in self.args.levels.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,2,3,4,6,8", help="concurrencies (1,2,3,4,6,8)")
    parser.add_argument("--requests", type=int, default=96, help="per mode and level (96)")
    parser.add_argument("--rounds", type=int, default=8, help="rounds per level (8)")
    parser.add_argument("--max-tokens", type=int, default=64, help="cap per request (64)")
    parser.add_argument("--parallel", type=int, default=8, help="llama.cpp slots per engine (8)")
    parser.add_argument("--rehearsal", type=Path, help="use this rehearsal.json, rehearse none")
    parser.add_argument(
        "--rehearsal-budget", default="15m", help="the rehearsal's time budget (15m)"
    )
    parser.add_argument("--keep-rehearsal", type=Path, help="copy the rehearsal's files here")
    parser.add_argument("--json", type=Path, help="write the per-level rows here")
    parser.add_argument("--raw", type=Path, help="write every request here (gzip JSON)")
    parser.add_argument("--report", type=Path, nargs="+", metavar="RAW", help="pool --raw files")
    parser.add_argument(
        "--crossover", type=int, help="with --report: the proven win C the runs routed by"
    )
    args = parser.parse_args()
    if args.report:
        if args.crossover is None:
            parser.error("--report needs --crossover (the C printed by the runs)")
        raw = [level for i, path in enumerate(args.report) for level in load_raw(path, run=i)]
        sweep = sweep_for(args.crossover, args.max_tokens)
    else:
        engines = Engines(args)
        raw = run_sweep(args, upstreams=engines.start, prepare=engines.prepare)
        assert engines.sweep is not None  # set by prepare, before the sweep
        sweep = engines.sweep
    rows = summarize(raw, sweep)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
