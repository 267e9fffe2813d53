"""Several candidate configurations (arms) in one rollout (issue 40), by seeded simulation.

Shadow stage 0 of the default policy; each sampled request is mirrored to one arm in turn,
so every arm has the same number of pairs at every look (a look every `--every` pairs of
each arm, up to `--pairs` per arm). Each arm's pairs are drawn by `gate.stats.simulated_pairs`
(`Scenario`: its TPOT ratio to the baseline, its evaluator drop), judged by the gate's
rule at the arm's alpha share (`arms.arm_policy`), and the arms by `arms.choose`.
Cases (the first decisive rollout verdict of each run; "ever": at any look to the end):

* `three`: arm 0 25 % faster (TPOT ratio 0.75), arm 1 10 % faster, arm 2 30 % faster
  but 5 points worse on an evaluator (the tempting harmful arm): the best arm chosen,
  the harmful one killed and never chosen, median pairs per arm at the decision;
* `equal`: two arms, both 20 % faster: a strict preference declared at any look;
* `aa`: three arms equal to the baseline: any arm killed, any promotion, at any look;
* `three-adaptive`, `equal-adaptive`: the same arms with traffic moved toward the leader
  (`toward_leader`: each block gives every arm `every` pairs and the current leader
  `every` more), the allocation the choice's guarantee must survive;
* `three-realloc`, `equal-realloc`: the stage after a boundary where `arms.reallocate`
  gave one arm `arms.behind_weight` (0.25 by default; `at_weights`): in `three` the
  second arm (the one the best proves behind), in `equal` arm b (an arm wrongly put
  behind: the strict-preference check under shares fixed apart from the data).

"pairs" at a decision count every arm's pairs together.

Rates carry 95 % Clopper-Pearson intervals.

    nice -n 10 python bench/arms_sim.py --runs 400 --seed 40 --json out.json
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from gate.stats.arms import ArmLooks, ArmState, ArmStream, arm_policy, choose
from gate.stats.cumulative import looks_every, to_stats
from gate.stats.ids import ALL
from gate.stats.policy import Policy, at_stage
from gate.stats.rule import Code, apply_rule
from gate.stats.sequences import MeanStats
from gate.stats.simulate import CHUNK_PAIRS, clopper_pearson
from gate.stats.simulated_pairs import Scenario, draw_pairs

CASES: dict[str, tuple[Scenario, ...]] = {
    "three": (
        Scenario("best", tpot_ratio=0.75),
        Scenario("second", tpot_ratio=0.90),
        Scenario("harmful", tpot_ratio=0.70, eval_drops=(0.05, 0.0)),
    ),
    "equal": (Scenario("a", tpot_ratio=0.8), Scenario("b", tpot_ratio=0.8)),
    "aa": (Scenario("a"), Scenario("b"), Scenario("c")),
}


def arm_streams(
    arms: tuple[Scenario, ...], policy: Policy, runs: int, pairs: int, every: int,
    rng: np.random.Generator,
) -> list[ArmStream]:  # fmt: skip
    """Return each arm's gate codes and primary statistics every `every` of its pairs."""
    judged = arm_policy(at_stage(policy, 0))
    looks = looks_every(pairs, every)
    streams = []
    for arm in arms:
        s = Scenario(arm.name, pairs=pairs, every=every, tpot_ratio=arm.tpot_ratio,
                     eval_drops=arm.eval_drops)  # fmt: skip
        stats = to_stats(draw_pairs(s, judged, runs, rng), judged, looks)
        cell = stats.cells[(policy.primary.metric, ALL)]
        assert isinstance(cell, MeanStats)
        code = apply_rule(judged, stats).code
        streams.append(ArmStream(np.broadcast_to(looks, code.shape), code, cell))
    return streams


def toward_leader(streams: list[ArmStream]) -> list[ArmStream]:
    """Re-time the arms' streams as if traffic moved toward the leader.

    Each block of traffic gives every arm one step of its stream (`every` pairs) and the
    current leader one more: the arm not yet killed with the lowest mean log-ratio at the
    end of the previous block (a predictable, data-dependent allocation).
    """
    n_arms, (runs, steps) = len(streams), streams[0].code.shape
    taken = np.zeros((n_arms, runs), dtype=np.int64)
    killed = np.zeros((n_arms, runs), dtype=bool)
    rows, at = np.arange(runs), []
    for _ in range(steps // 2):
        taken += 1
        last = taken - 1
        mean = np.stack([_mean(s.primary, last[k]) for k, s in enumerate(streams)])
        killed |= np.stack([s.code[rows, last[k]] == Code.KILL for k, s in enumerate(streams)])
        leader = np.argmin(np.where(killed, np.inf, mean), axis=0)
        taken[leader, rows] += 1
        at.append(taken - 1)
    index = np.stack(at, axis=-1)  # arms x runs x blocks
    return [_take(s, index[k]) for k, s in enumerate(streams)]


def at_weights(streams: list[ArmStream], weights: tuple[float, ...]) -> list[ArmStream]:
    """Re-time the arms' streams as one stage at fixed weights (`arms.reallocate`).

    Block b gives an arm of weight w its stream up to step ceil(b w): a full arm a step
    (`every` pairs) a block, an arm at 0.25 a step every 4 blocks (its first up front).
    """
    steps = streams[0].code.shape[-1]
    blocks = np.arange(1, steps + 1)
    out = []
    for s, w in zip(streams, weights, strict=True):
        index = np.broadcast_to(np.ceil(blocks * w).astype(np.int64) - 1, s.code.shape)
        out.append(_take(s, index))
    return out


# The weights the `-realloc` cases give their arms (`at_weights`).
REALLOC = {"three": (1.0, 0.25, 1.0), "equal": (1.0, 0.25)}


def _mean(stats: MeanStats, at: np.ndarray) -> np.ndarray:
    rows = np.arange(at.size)
    n = np.asarray(stats.n)[rows, at]
    return np.where(n > 0, np.asarray(stats.total)[rows, at] / np.maximum(n, 1), np.inf)


def _take(s: ArmStream, index: np.ndarray) -> ArmStream:
    def pick(values: Any) -> np.ndarray:
        return np.take_along_axis(np.asarray(values), index, axis=-1)

    stats = MeanStats(pick(s.primary.n), pick(s.primary.total), pick(s.primary.total_sq))
    return ArmStream(pick(s.pairs), pick(s.code), stats)


def simulate_arms(
    name: str, policy: Policy, runs: int, pairs: int, every: int, rng: np.random.Generator
) -> tuple[ArmLooks, np.ndarray]:
    """Return the multi-arm rule at every look of `runs` runs, and each look's total pairs."""
    adaptive, case = name.endswith(ADAPTIVE), _case(name)
    arms = CASES[case]
    streams = arm_streams(arms, policy, runs, pairs, every, rng)
    looks = looks_every(pairs, every) * len(arms)
    if adaptive:
        streams = toward_leader(streams)
        looks = np.arange(1, streams[0].code.shape[-1] + 1) * every * (len(arms) + 1)
    if name.endswith(REALLOCATED):
        streams = at_weights(streams, REALLOC[case])
        looks = sum(np.asarray(s.pairs)[0] for s in streams)
    return choose(at_stage(policy, 0), streams), looks


# A case name with this suffix moves traffic toward the leader (`toward_leader`), or
# runs at the weights a stage boundary's reallocation set (`at_weights`).
ADAPTIVE, REALLOCATED = "-adaptive", "-realloc"


def _case(name: str) -> str:
    return name.removesuffix(ADAPTIVE).removesuffix(REALLOCATED)


def run_case(
    name: str, policy: Policy, runs: int, pairs: int, every: int, seed: int
) -> dict[str, Any]:
    """Return one case's rates over `runs` seeded runs."""
    rng = np.random.default_rng(seed)
    chunk = max(1, CHUNK_PAIRS // pairs)
    parts = [
        _outcomes(*simulate_arms(name, policy, min(chunk, runs - start), pairs, every, rng))
        for start in range(0, runs, chunk)
    ]
    out = {k: np.concatenate([p[k] for p in parts], axis=-1) for k in parts[0]}
    return _summary(name, out, runs, pairs)


def _outcomes(got: ArmLooks, looks: np.ndarray) -> dict[str, np.ndarray]:
    """Per run: the first decisive look's code, winner and pairs; kills; strict preference."""
    decisive = got.code != Code.CONTINUE
    hit = decisive.any(axis=-1)
    first = np.where(hit, decisive.argmax(axis=-1), looks.size - 1)
    rows = np.arange(first.size)
    killed = got.state == ArmState.KILLED
    strict = np.zeros(first.shape, dtype=bool)
    for i in range(got.state.shape[0]):
        for j in range(got.state.shape[0]):
            if i != j:
                strict |= (got.upper[i] < got.lower[j]).any(axis=-1)
    return {
        "code": np.where(hit, got.code[rows, first], Code.CONTINUE),
        "winner": np.where(hit, got.winner[rows, first], -1),
        "pairs": np.where(hit, looks[first], np.nan),
        "killed_at_decision": killed[:, rows, first],
        "killed_ever": killed[..., -1],
        "promoted_ever": (got.code == Code.PROMOTE).any(axis=-1),
        "chosen_ever": np.stack([(got.winner == k).any(axis=-1) for k in range(killed.shape[0])]),
        "strict": strict,
    }


def _rate(k: int, n: int) -> list[float]:
    return [round(x, 4) for x in clopper_pearson(int(k), n)]


def _summary(name: str, out: dict[str, np.ndarray], runs: int, pairs: int) -> dict[str, Any]:
    promoted = out["code"] == Code.PROMOTE
    row: dict[str, Any] = {
        "case": name,
        "runs": runs,
        "pairs_per_arm": pairs,
        "promote": _rate(promoted.sum(), runs),
        "kill": _rate((out["code"] == Code.KILL).sum(), runs),
        "winner_share": {
            str(k): _rate((out["winner"] == k).sum(), runs) for k in range(len(CASES[_case(name)]))
        },
        "median_pairs_at_decision": _median(out["pairs"][promoted]),
        "arm_killed_by_decision": [_rate(k.sum(), runs) for k in out["killed_at_decision"]],
        "arm_killed_ever": [_rate(k.sum(), runs) for k in out["killed_ever"]],
        "arm_chosen_ever": [_rate(k.sum(), runs) for k in out["chosen_ever"]],
        "any_arm_killed_ever": _rate(out["killed_ever"].any(axis=0).sum(), runs),
        "promoted_ever": _rate(out["promoted_ever"].sum(), runs),
        "strict_preference_ever": _rate(out["strict"].sum(), runs),
    }
    return row


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if values.size else None


def main() -> None:
    """Run the cases and print (and optionally save) their rates."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--seed", type=int, default=40)
    ap.add_argument("--pairs", type=int, default=6000, help="pairs per arm")
    ap.add_argument("--aa-pairs", type=int, default=20_000, help="pairs per arm, A/A")
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument(
        "--cases",
        default=",".join(
            [*CASES, "three-adaptive", "equal-adaptive", "three-realloc", "equal-realloc"]
        ),
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    policy, rows = Policy(), []
    for k, name in enumerate(args.cases.split(",")):
        t0 = time.perf_counter()
        pairs = args.aa_pairs if name == "aa" else args.pairs
        row = run_case(name, policy, args.runs, pairs, args.every, args.seed + k)
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        print(json.dumps(row))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
