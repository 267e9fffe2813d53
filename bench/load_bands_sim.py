"""Load bands in shadow mode: does the gate promote a gain that exists only at low load?

Whole shadow rollouts walk the policy's stages (`gate.stats.simulate.run_stages`): sample
rate 1.0, stage i's candidate carries `stages[i]` percent of the traffic, so its running
requests ~ Poisson(share x 64) beside the baseline's ~ Poisson(64). The candidate's TPOT
gain is a stated function of its load as a share c of the baseline's mean load, linear
between g(0.01) and g(1):

* falling: 25 % at 1 % load to -10 % at full load;
* flat: 20 % at every load.

Each stage draws `--pairs` pairs and looks every `--every`; a promotion moves the run on,
any other first decision ends it. The policy is the default one except: no minimum
duration (the criteria count pairs), one segment, and the simulated pairs carry no
evaluators and no route failures, so the latency gain and its load are what the gate
decides on (with the default guardrail set the other guardrails alone take ~2,000 pairs
per stage: no gate passes two stages within 3,000 pairs).

Usage: python bench/load_bands_sim.py [--runs 400] [--seed 26] [--pairs 3000] [--every 10]
"""

from __future__ import annotations

import argparse
import time

from gate.stats.policy import Policy
from gate.stats.simulate import StagedOutcomes, run_stages
from gate.stats.simulated_pairs import Scenario

BASELINE_LOAD = 64.0


def _fmt(rate: tuple[float, float, float]) -> str:
    return f"{rate[0]:.3f} [{rate[1]:.3f}, {rate[2]:.3f}]"


def row(name: str, out: StagedOutcomes, policy: Policy) -> str:
    last = len(policy.stages) - 1
    at25 = policy.stages.index(25.0)
    return (
        f"| {name} | {out.runs} | {_fmt(out.share('promoted'))}"
        f" | {_fmt(out.reached_within(last, float('inf')))}"
        f" | {_fmt(out.reached_within(at25, 3000))}"
        f" | {out.reasons.get('hold:load_untested', 0)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--every", type=int, default=10)
    args = parser.parse_args()
    base = Policy(min_duration_s=0, segments=["chat"])
    off = base.model_copy(
        update={
            "guardrails": base.guardrails.model_copy(
                update={
                    "load_bands": base.guardrails.load_bands.model_copy(
                        update={"hold_untested_load": False}
                    )
                }
            )
        }
    )
    with_60 = base.model_copy(update={"stages": [1.0, 5.0, 25.0, 60.0, 100.0]})
    print(
        "| candidate, policy | runs | promoted (95% CP) | entered the last stage"
        " | entered 25% within 3,000 pairs | load holds |"
    )
    print("|---|---|---|---|---|---|")
    for gain_name, gain in (("falling 25% -> -10%", (0.25, -0.10)), ("flat 20%", (0.20, 0.20))):
        s = Scenario(
            gain_name, pairs=args.pairs, every=args.every, baseline_load=BASELINE_LOAD,
            gain_at=gain, eval_drops=(), error_rate=0.0,
        )  # fmt: skip
        for policy_name, policy in (
            ("hold on (default)", base),
            ("hold off", off),
            ("hold on, stages 1/5/25/60/100", with_60),
        ):
            t = time.perf_counter()
            out = run_stages(s, policy, runs=args.runs, seed=args.seed)
            print(row(f"{gain_name}, {policy_name}", out, policy), end="")
            print(f"  <!-- {time.perf_counter() - t:.1f} s -->")


if __name__ == "__main__":
    main()
