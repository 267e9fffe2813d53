"""Speculate below the crossover: false kills of an A/A run, and a slower route's detection.

In this mode (`promotion.route_by_load`) the gate judges only the mirrored pairs: a
sampled request is served by the baseline and mirrored to the candidate, while the
unsampled ones go to the candidate below the crossover C and to the baseline above it.
The two calls of a pair meet the same moment but not the same load: each route carries
what the routing gave it. This simulation draws the gate's pairs as `gate.stats.simulated_pairs`
does (its latency, failure, evaluator and acceptance model) and routes them by load:

* at each pair's start L other requests run, L ~ Poisson(`--load`); each is mirrored with
  the sample rate s (m ~ Binomial(L, s): on both routes), the others are routed: the
  candidate takes min(u, max(0, C - m)) of the u = L - m, the baseline the rest. The
  routes' running requests, stamped on the pair, are then n_b = L - routed and
  n_c = m + routed (hysteresis left out: a plain threshold at C);
* each route's TTFT and TPOT grow with its own running requests, x (1 + a n), as in a
  batching engine; both routes share the slope a (the A/A case: identical routes);
* the judged rollout is promoted: the gate runs its last stage's rule
  (`at_stage(policy, last)`) at every look, and a run counts as a kill when any look
  kills (promote and hold verdicts change nothing in this mode; only a kill acts).

Scenarios: A/A (tpot_ratio 1) and a candidate 25 % slower in TPOT at every load, at
several loads and slopes, C = `--crossover`. For comparison the same slower candidate in
plain shadow mode (every pair mirrored, no load effect) as `run_scenario` draws it, with
the first decisive verdict as its outcome. The policy is the default one except no
minimum duration (the criteria count pairs).

With `--tolerances 1` the gate judges as it does a promoted rollout routed by load
(`promotion.load_match`, `gate.stats.policy.load_tolerance`): only the pairs whose two
loads differ by at most 1; the mirrored pairs are drawn in proportion, so that about
`--pairs` of them are judged, and "pairs to kill" counts mirrored pairs.

Usage: nice -n 10 python bench/by_load_sim.py [--runs 400] [--seed 41] [--pairs 3000]
           [--every 20] [--crossover 6] [--sample-rate 0.1] [--loads 2,6,12]
           [--slopes 0,0.02,0.05] [--tolerances none,1] [--candidates aa,slower]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, replace

import numpy as np

from gate.db.enums import RolloutMode
from gate.stats.columns import PairColumns, load_matched
from gate.stats.cumulative import looks_every, to_stats
from gate.stats.policy import Policy, at_stage
from gate.stats.rule import Code, apply_rule
from gate.stats.simulate import clopper_pearson, run_scenario
from gate.stats.simulated_pairs import Scenario, draw_pairs

CHUNK_RUNS = 100
CHUNK_PAIRS = 400_000


@dataclass(frozen=True)
class Routed:
    """The load routing: mean other requests, the crossover, the sample rate, the slope."""

    load: float
    crossover: int
    sample_rate: float
    slope: float


def route(cols: PairColumns, r: Routed, rng: np.random.Generator) -> PairColumns:
    """Give each pair both routes' running requests and scale its latencies by them."""
    shape = cols.segment.shape
    total = rng.poisson(r.load, shape)
    mirrored = rng.binomial(total, r.sample_rate)
    unsampled = total - mirrored
    routed = np.minimum(unsampled, np.maximum(0, r.crossover - mirrored))
    load = np.stack([total - routed, mirrored + routed], axis=-1).astype(np.float64)
    factor = 1.0 + r.slope * load
    ttft = cols.ttft * factor
    decode = (cols.e2e - cols.ttft) * factor
    return replace(cols, ttft=ttft, tpot=cols.tpot * factor, e2e=ttft + decode, load=load)


def overdraw(r: Routed, tolerance: float) -> int:
    """Return how many mirrored pairs to draw per judged one: 1 / the matched share, rounded up."""
    probe = PairColumns(
        segment=np.zeros((1, 100_000), dtype=np.int64), created_s=np.zeros((1, 100_000)),
        is_control=np.zeros((1, 100_000), dtype=bool), dropped=np.zeros((1, 100_000), dtype=bool),
        ttft=np.ones((1, 100_000, 2)), tpot=np.ones((1, 100_000, 2)),
        e2e=np.ones((1, 100_000, 2)), failed=np.zeros((1, 100_000, 2), dtype=bool),
        acceptance=np.ones((1, 100_000)),
    )  # fmt: skip
    share = float(load_matched(route(probe, r, np.random.default_rng(0)), tolerance).mean())
    return max(1, int(np.ceil(1.0 / share)))


def killed(
    s: Scenario, r: Routed, policy: Policy, runs: int, seed: int, tolerance: float | None
) -> tuple[int, list[int]]:
    """Return how many runs any look killed, and the mirrored pairs each kill took.

    With a `tolerance` the gate judges as it does a promoted rollout routed by load
    (`policy.load_tolerance`): only the pairs whose routes' loads differ by at most that.
    It then sees about `s.pairs` of them: the mirrored pairs are drawn in proportion, and
    looked at every `s.every` judged pairs or so."""
    rng = np.random.default_rng(seed)
    over = 1 if tolerance is None else overdraw(r, tolerance)
    drawn = replace(s, pairs=s.pairs * over)
    looks = looks_every(drawn.pairs, s.every * over)
    chunk = max(1, min(CHUNK_RUNS, CHUNK_PAIRS // drawn.pairs))
    kills, at = 0, []
    for start in range(0, runs, chunk):
        cols = route(draw_pairs(drawn, policy, min(chunk, runs - start), rng), r, rng)
        stats = to_stats(cols, policy, looks, mode=RolloutMode.SHADOW, load_match=tolerance)
        ev = apply_rule(policy, stats)
        hit = np.asarray(ev.code == Code.KILL)
        kills += int(hit.any(axis=-1).sum())
        at += [int(looks[i]) for i in hit.argmax(axis=-1)[hit.any(axis=-1)]]
    return kills, at


def _fmt(k: int, n: int) -> str:
    rate, lo, hi = clopper_pearson(k, n)
    return f"{k}/{n} = {rate:.3f} [{lo:.3f}, {hi:.3f}]"


def _median(at: list[int]) -> str:
    return f"{int(np.median(at))}" if at else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--crossover", type=int, default=6)
    parser.add_argument("--sample-rate", type=float, default=0.1)
    parser.add_argument("--loads", default="2,6,12")
    parser.add_argument("--slopes", default="0,0.02,0.05")
    parser.add_argument("--tolerances", default="none,1")
    parser.add_argument("--candidates", default="aa,slower", help="aa, slower, or both")
    args = parser.parse_args()
    base = Policy(min_duration_s=0)
    last = at_stage(base, len(base.stages) - 1)
    print(f"crossover {args.crossover}, sample rate {args.sample_rate}, {args.pairs} pairs,"
          f" a look every {args.every}, {args.runs} runs each, seed {args.seed}")  # fmt: skip
    print("| candidate | load (mean others) | slope a | judged pairs | mean n_b / n_c"
          " | runs killed (95% CP) | median mirrored pairs to kill |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    tolerances = [None if t == "none" else float(t) for t in args.tolerances.split(",")]
    kinds = {"aa": ("A/A", 1.0), "slower": ("25% slower TPOT", 1.25)}
    for name, ratio in (kinds[k] for k in args.candidates.split(",")):
        s = Scenario(name, pairs=args.pairs, every=args.every, tpot_ratio=ratio)
        for load in (float(x) for x in args.loads.split(",")):
            for slope in (float(x) for x in args.slopes.split(",")):
                for tol in tolerances:
                    r = Routed(load, args.crossover, args.sample_rate, slope)
                    t = time.perf_counter()
                    k, at = killed(s, r, last, args.runs, args.seed, tol)
                    routed = route(draw_pairs(s, base, 1, np.random.default_rng(0)), r,
                                   np.random.default_rng(1))  # fmt: skip
                    assert routed.load is not None
                    probe_n = routed.load[..., 0].size
                    probe = routed.load[load_matched(routed, tol)]
                    nb, nc = probe[..., 0].mean(), probe[..., 1].mean()
                    which = "all mirrored" if tol is None else f"load-matched (within {tol:g})"
                    if tol is not None:
                        which += f", {len(probe) / probe_n:.0%} of them"
                    print(f"| {name} | {load:g} | {slope:g} | {which} | {nb:.1f} / {nc:.1f}"
                          f" | {_fmt(k, args.runs)} | {_median(at)} |"
                          f"  <!-- {time.perf_counter() - t:.0f} s -->")  # fmt: skip
    slower = Scenario("25% slower, shadow", pairs=args.pairs, every=args.every, tpot_ratio=1.25)
    out = run_scenario(slower, base, runs=args.runs, seed=args.seed, stage=len(base.stages) - 1)
    at = [int(x) for x in out.pairs_at[out.codes == Code.KILL]]
    print(f"| 25% slower TPOT, plain shadow (first decisive verdict) | - | 0 | all | - |"
          f" {_fmt(out.count(Code.KILL), out.runs)} | {_median(at)} |")  # fmt: skip


if __name__ == "__main__":
    main()
