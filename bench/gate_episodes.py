"""The gate with conversations and agent episodes as the unit (issue 39).

Stage 0 of the default policy (shadow; `--mode canary`: each episode served by one
cohort, `--per-request`: a cohort coin per request) on interleaved conversations of 5-20
requests (`Scenario.episode_len`), an episode random effect on the candidate's TPOT and TTFT
log-ratios at intra-episode correlation `--iccs`, evaluated with the episode statistics
(`episode` column: cluster-robust variance) and, on the same draws, as if the pairs were
independent (the gate before issue 39). Per ICC:

* A/A (no change): false kills and false promotions, whole default policy;
* boundary (TPOT ratio exactly 1 - min_gain): false promotions;
* a 20 % TPOT gain: promotions, and the pairs and episodes to the promotion (median);
* `aa_evals` (not in the default `--cases`): A/A with the evaluators' paired differences
  correlated within episodes at the same ICC (`Scenario.eval_icc`);
* `--rates` (shadow): greedy mismatch (half the episodes greedy, a tenth the control
  slice), thumbs-down and acceptance too, each alike within conversations at the same ICC
  (`Scenario.rates_icc`), so greedy mismatch, feedback and the collapse detectors are judged.

Each case is `--runs` seeded runs of up to `--pairs` pairs looked at every `--every`;
rates carry 95 % Clopper-Pearson intervals.

    nice -n 10 python bench/gate_episodes.py --runs 400 --seed 39 --json out.json
    nice -n 10 python bench/gate_episodes.py --mode canary --cases aa,boundary --json out.json
    nice -n 15 python bench/gate_episodes.py --rates --cases aa,boundary --json out.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from typing import Any

import numpy as np

from gate.db.enums import RolloutMode
from gate.stats.cumulative import looks_every, to_stats
from gate.stats.policy import Policy, at_stage
from gate.stats.rule import Code, apply_rule
from gate.stats.simulate import CHUNK_PAIRS, clopper_pearson
from gate.stats.simulated_pairs import Scenario, draw_pairs


def run_case(
    s: Scenario, policy: Policy, runs: int, seed: int, *, episodes: bool
) -> dict[str, Any]:
    """Return first-decision counts of `runs` runs, with or without the episode column."""
    policy = at_stage(policy, 0)
    rng = np.random.default_rng(seed)
    looks = looks_every(s.pairs, s.every)
    chunk = max(1, CHUNK_PAIRS // s.pairs)
    codes, at, eps, reasons = [], [], [], dict[str, int]()
    for start in range(0, runs, chunk):
        cols = draw_pairs(s, policy, min(chunk, runs - start), rng)
        judged = cols if episodes else replace(cols, episode=None)
        ev = apply_rule(policy, to_stats(judged, policy, looks, mode=s.mode))
        decisive = ev.code != Code.CONTINUE
        first = np.where(decisive.any(axis=-1), decisive.argmax(axis=-1), -1)
        rows = np.arange(first.size)
        code = np.where(first >= 0, ev.code[rows, first], Code.CONTINUE)
        codes.append(code)
        pairs_at = np.where(first >= 0, looks[first], s.pairs)
        at.append(pairs_at)
        assert cols.episode is not None
        eps.append([len(np.unique(cols.episode[r, : pairs_at[r]])) for r in rows])
        killed = (first >= 0) & (code == Code.KILL)
        collapsed = {("acceptance_collapse", seg): f for seg, f in ev.collapsed.items()}
        for key, flag in {**ev.harmful, **collapsed}.items():
            hit = int((np.broadcast_to(flag, ev.code.shape)[rows, first] & killed).sum())
            if hit:
                reasons[":".join(key)] = reasons.get(":".join(key), 0) + hit
    c, p, e = np.concatenate(codes), np.concatenate(at), np.concatenate(eps)
    out: dict[str, Any] = {"runs": runs, "kill_reasons": reasons}
    for name, wanted in (("kill", Code.KILL), ("promote", Code.PROMOTE)):
        k = int((c == wanted).sum())
        out[name] = [k, *clopper_pearson(k, runs)]
    promoted = c == Code.PROMOTE
    if promoted.any():
        out["promote_pairs_median"] = float(np.median(p[promoted]))
        out["promote_episodes_median"] = float(np.median(e[promoted]))
    return out


def main() -> None:
    """Run the cases and print (and optionally save) the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--pairs", type=int, default=6000)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--iccs", default="0,0.2,0.5")
    ap.add_argument("--cases", default="aa,boundary,gain20")
    ap.add_argument("--mode", choices=[m.value for m in RolloutMode], default="shadow")
    ap.add_argument(
        "--per-request", action="store_true",
        help="canary: a cohort coin per request instead of per episode (before issue 39)",
    )  # fmt: skip
    ap.add_argument(
        "--only-episodes", action="store_true",
        help="skip the same draws judged as independent pairs (the gate before issue 39)",
    )  # fmt: skip
    ap.add_argument(
        "--rates", action="store_true",
        help="shadow: greedy mismatch, thumbs-down and acceptance alike within episodes too",
    )  # fmt: skip
    ap.add_argument("--json")
    args = ap.parse_args()
    policy = Policy()
    gain = policy.primary.min_gain
    ratios = {"aa": 1.0, "boundary": 1.0 - gain, "gain20": 0.8, "aa_evals": 1.0}
    results: list[dict[str, Any]] = []
    for icc in (float(x) for x in args.iccs.split(",")):
        for case in args.cases.split(","):
            s = Scenario(
                f"{case} icc {icc}", pairs=args.pairs, every=args.every,
                tpot_ratio=ratios[case], episode_len=(5, 20), episode_icc=icc,
                eval_icc=icc if case == "aa_evals" else 0.0, mode=RolloutMode(args.mode),
                sticky=not args.per_request, rates_icc=icc if args.rates else None,
            )  # fmt: skip
            for episodes in (True,) if args.only_episodes else (True, False):
                t0 = time.monotonic()
                got = run_case(s, policy, args.runs, args.seed, episodes=episodes)
                row = {"case": case, "icc": icc, "episodes": episodes, **got}
                row["seconds"] = round(time.monotonic() - t0, 1)
                results.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
