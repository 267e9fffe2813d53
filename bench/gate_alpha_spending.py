"""Rollout-wide false kills and the cost of spending alpha_kill across stages (issue 23).

Each simulated rollout runs every stage of the default policy (1, 5, 25, 100 %) as a
harmless A/A stage of `--pairs` pairs looked at every `--every` pairs, each stage with its
own draws; a rollout is falsely killed when any stage kills it. This is the worst case for
false kills: an A/A stage never promotes, so each stage is looked at up to its horizon
(a real harmless rollout would leave a stage at its promotion).

"before" judges each stage at the whole alpha_kill (what every stage spent before the
split), "after" at its share, `gate.stats.policy.kill_alpha` (alpha_kill / 4); both on the
same draws. The cost of the split is the pairs a real 3-point evaluator drop takes to be
killed in one stage (looks every 50 pairs up to 10,000), again on the same draws.

    python bench/gate_alpha_spending.py --runs 400 --seed 23 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from gate.stats.policy import Policy, kill_alpha
from gate.stats.rule import Code
from gate.stats.simulate import Outcomes, clopper_pearson, run_scenario
from gate.stats.simulated_pairs import Scenario


def _per_stage_alpha(policy: Policy) -> Policy:
    # Before the split: alpha_kill scaled up so each stage's share is the whole budget.
    return policy.model_copy(update={"alpha_kill": policy.alpha_kill * len(policy.stages)})


def rollout_false_kills(
    policy: Policy, runs: int, seed: int, pairs: int, every: int, drop: float = 0.0
) -> dict[str, Any]:
    """Return kill counts per stage and over the rollout, before and after the split.

    `drop` (0: A/A) plants an evaluator drop of that many points in every stage.
    """
    aa = Scenario("A/A", pairs=pairs, every=every, eval_drops=(drop, 0.0))
    out: dict[str, Any] = {}
    for label, judged in (("before", _per_stage_alpha(policy)), ("after", policy)):
        killed = np.zeros(runs, dtype=bool)
        per_stage, reasons = [], dict[str, int]()
        for stage in range(len(policy.stages)):
            # The same seed per stage for both labels: the same pairs are judged twice.
            got = run_scenario(aa, judged, runs=runs, seed=seed + stage, stage=stage)
            hit = got.codes == Code.KILL
            per_stage.append(int(hit.sum()))
            killed |= hit
            for reason, count in got.kill_reasons.items():
                reasons[reason] = reasons.get(reason, 0) + count
        rate, lo, hi = clopper_pearson(int(killed.sum()), runs)
        out[label] = {
            "stage_alpha": kill_alpha(judged, 0),
            "kills_per_stage": per_stage,
            "rollouts_killed": int(killed.sum()),
            "kill_reasons": reasons,
            "rate": rate,
            "cp95": [lo, hi],
        }
    return out


def _pairs_summary(out: Outcomes) -> dict[str, Any]:
    killed = out.codes == Code.KILL
    at = out.pairs_at[killed]
    rate, lo, hi = out.rate(Code.KILL)
    return {
        "killed": int(killed.sum()),
        "rate": rate,
        "cp95": [lo, hi],
        "pairs_mean": float(at.mean()) if at.size else None,
        "pairs_median": float(np.median(at)) if at.size else None,
        "pairs_p90": float(np.quantile(at, 0.9)) if at.size else None,
    }


def drop_cost(policy: Policy, runs: int, seed: int) -> dict[str, Any]:
    """Return pairs-to-kill of a 3-point evaluator drop, before and after the split."""
    drop = Scenario("eval -3 points", pairs=10_000, every=50, eval_drops=(0.0, 0.03))
    before = run_scenario(drop, _per_stage_alpha(policy), runs=runs, seed=seed + 100)
    after = run_scenario(drop, policy, runs=runs, seed=seed + 100)
    both = (before.codes == Code.KILL) & (after.codes == Code.KILL)
    ratio = after.pairs_at[both] / before.pairs_at[both]
    return {
        "before": _pairs_summary(before),
        "after": _pairs_summary(after),
        "paired_ratio_mean": float(ratio.mean()) if ratio.size else None,
        "paired_ratio_median": float(np.median(ratio)) if ratio.size else None,
    }


def main() -> None:
    """Run both measurements and print them (and write JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--pairs", type=int, default=20_000, help="A/A pairs per stage")
    parser.add_argument("--every", type=int, default=10, help="A/A look every N pairs")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    policy = Policy()
    t0 = time.perf_counter()
    aa = rollout_false_kills(policy, args.runs, args.seed, args.pairs, args.every)
    cost = drop_cost(policy, args.runs, args.seed)
    result = {
        "runs": args.runs,
        "seed": args.seed,
        "stages": policy.stages,
        "alpha_kill": policy.alpha_kill,
        "aa_pairs_per_stage": args.pairs,
        "aa_every": args.every,
        "aa": aa,
        "drop3": cost,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    for label in ("before", "after"):
        row = aa[label]
        lo, hi = row["cp95"]
        print(
            f"A/A over {len(policy.stages)} stages, {label:<6} (stage alpha "
            f"{row['stage_alpha']:.5f}): kills per stage {row['kills_per_stage']}, "
            f"rollouts killed {row['rollouts_killed']}/{args.runs} = {row['rate']:.4f} "
            f"[{lo:.4f}, {hi:.4f}]; cells that fired {row['kill_reasons']}"
        )
    for label in ("before", "after"):
        row = cost[label]
        lo, hi = row["cp95"]
        print(
            f"3-point drop, {label:<6}: killed {row['killed']}/{args.runs} "
            f"= {row['rate']:.4f} [{lo:.4f}, {hi:.4f}] within 10,000; pairs to kill "
            f"mean {row['pairs_mean']:.0f}, median {row['pairs_median']:.0f}, "
            f"p90 {row['pairs_p90']:.0f}"
        )
    print(
        f"pairs to kill, after / before on the same draws: mean ratio "
        f"{cost['paired_ratio_mean']:.3f}, median {cost['paired_ratio_median']:.3f}"
    )
    print(f"({result['seconds']} s)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
