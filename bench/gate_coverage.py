"""Time-uniform coverage of every interval family the gate uses, by seeded simulation.

A confidence sequence at level alpha (one side) promises P(the bound *ever* excludes the
true value, at any look) <= alpha. This script draws `--runs` streams per scenario, looks
after every observation (every 10th for the greedy two-proportion bound, which bisects),
from the first to the horizon, and counts the runs whose lower bound ever rose above the
truth and those whose upper bound ever fell below it, each side at `--alpha`; rates with
95% Clopper-Pearson intervals. The truth is analytic where it can be, else the mean of
2,000,000 draws (Monte Carlo error under 1e-3 of the intervals' widths).

Families (what the gate calls, `gate.stats.sequences` / `gate.stats.betting` / `change`):
* asymptotic, `mean_interval`: paired latency log-ratios (primary TPOT / e2e, ttft_p50;
  winsorised at +/- log 20);
* exact, `bounded_mean_interval` (betting on values in [0, 1] from count, sum and sum of
  squares): per-request acceptance (floor test);
* asymptotic, `two_mean_interval`: canary latency, log latency per cohort;
* exact, `diff_interval` on `PairedCounts` (betting, {-1, 0, 1}): failures, evaluator fail
  rates, tail exceedance, feedback;
* exact, `diff_interval` on `CohortCounts` (betting on inverse-propensity pseudo-outcomes):
  the same rates in canary mode, and the cancel rate;
* exact, `two_proportion_interval` (two betting sequences, union bound): greedy mismatch;
* exact, Shiryaev-Roberts acceptance-collapse detector: false alarm within its horizon.

    python bench/gate_coverage.py --runs 2000 --seed 23 [--alpha 0.05] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gate.stats.betting import below, bounded_rejects, exceeds, two_proportion_interval
from gate.stats.change import log_evalues, log_sr_path, log_threshold
from gate.stats.sequences import (
    LOG_RATIO_CLIP,
    BoolArray,
    CohortCounts,
    CountStats,
    FloatArray,
    MeanStats,
    PairedCounts,
    TwoCounts,
    TwoMeans,
    mean_interval,
    two_mean_interval,
)
from gate.stats.simulate import clopper_pearson

Rng = np.random.Generator
TRUTH_DRAWS = 2_000_000


@dataclass(frozen=True)
class Row:
    """One scenario's coverage: misses of each side over `runs` streams."""

    family: str
    guarantee: str
    scenario: str
    horizon: int
    runs: int
    alpha: float
    lower_misses: int
    upper_misses: int

    def as_dict(self) -> dict[str, Any]:
        """Return the row with rates and 95% CP intervals."""
        out: dict[str, Any] = dict(self.__dict__)
        for side in ("lower", "upper"):
            rate, lo, hi = clopper_pearson(getattr(self, f"{side}_misses"), self.runs)
            out[f"{side}_rate"], out[f"{side}_cp95"] = rate, [lo, hi]
        return out


# Latency draws ---------------------------------------------------------------------------


def _stall(rng: Rng, shape: tuple[int, ...], p: float) -> FloatArray:
    """Multiplicative stalls: with probability p a factor 1 + 2 x Lomax(1.2) (heavy tail)."""
    hit = rng.random(shape) < p
    return np.where(hit, 1.0 + 2.0 * rng.pareto(1.2, shape), 1.0)


def _call(rng: Rng, shape: tuple[int, ...], p_stall: float) -> FloatArray:
    return np.exp(rng.normal(0.0, 0.25, shape)) * _stall(rng, shape, p_stall)


def ratio_lognormal(rng: Rng, shape: tuple[int, ...]) -> FloatArray:
    """Clipped log(cand / base): per-call log-normal noise (sd 0.25), candidate 10% faster."""
    return _clip(np.log(0.9 * _call(rng, shape, 0.0) / _call(rng, shape, 0.0)))


def ratio_stalls(rng: Rng, shape: tuple[int, ...]) -> FloatArray:
    """The same, plus heavy-tailed stalls: 1% of baseline calls, 4% of candidate calls."""
    return _clip(np.log(0.9 * _call(rng, shape, 0.04) / _call(rng, shape, 0.01)))


def ratio_t2(rng: Rng, shape: tuple[int, ...]) -> FloatArray:
    """A log-ratio with infinite variance before winsorising: 0.3 x Student t(2), skewed by
    2% of pairs where the candidate alone stalls (x 5)."""
    skew = np.where(rng.random(shape) < 0.02, np.log(5.0), 0.0)
    return _clip(0.3 * rng.standard_t(2.0, shape) + skew)


def _clip(x: FloatArray) -> FloatArray:
    return np.asarray(np.clip(x, -LOG_RATIO_CLIP, LOG_RATIO_CLIP), dtype=np.float64)


def acceptance_beta19(rng: Rng, shape: tuple[int, ...]) -> FloatArray:
    """Per-request acceptance ~ Beta(1, 9): a poor draft, mean 0.1, skewed right."""
    return rng.beta(1.0, 9.0, shape)


def acceptance_bimodal(rng: Rng, shape: tuple[int, ...]) -> FloatArray:
    """25% of requests accept nothing, the rest ~ Beta(8, 2): mean 0.6, two modes."""
    return np.where(rng.random(shape) < 0.25, 0.0, rng.beta(8.0, 2.0, shape))


def acceptance_rare_zero(rng: Rng, shape: tuple[int, ...]) -> FloatArray:
    """95% of requests ~ Beta(18, 2) (mean 0.9), 5% accept nothing: a long left tail."""
    return np.where(rng.random(shape) < 0.05, 0.0, rng.beta(18.0, 2.0, shape))


def _truth(draw: Callable[[Rng, tuple[int, ...]], FloatArray], seed: int) -> float:
    rng = np.random.default_rng(seed + 10_000)
    return float(np.mean(draw(rng, (TRUTH_DRAWS,))))


# Families ------------------------------------------------------------------------------


def _misses(lower: FloatArray, upper: FloatArray, truth: float) -> tuple[int, int]:
    return int((lower > truth).any(axis=-1).sum()), int((upper < truth).any(axis=-1).sum())


def mean_family(x: FloatArray, truth: float, alpha: float, n_opt: float) -> tuple[int, int]:
    """Misses of `mean_interval` over every prefix of each row of `x`."""
    n = np.broadcast_to(np.arange(1, x.shape[-1] + 1, dtype=np.float64), x.shape)
    stats = MeanStats(n, np.cumsum(x, axis=-1), np.cumsum(x * x, axis=-1))
    got = mean_interval(stats, alpha_lower=alpha, alpha_upper=alpha, n_opt=n_opt)
    return _misses(np.asarray(got.lower), np.asarray(got.upper), truth)


def bounded_family(x: FloatArray, truth: float, alpha: float) -> tuple[int, int]:
    """Misses of `bounded_mean_interval` (acceptance) over every prefix of each row of `x`."""
    n = np.broadcast_to(np.arange(1, x.shape[-1] + 1, dtype=np.float64), x.shape)
    stats = MeanStats(n, np.cumsum(x, axis=-1), np.cumsum(x * x, axis=-1))
    # The capital is monotone in m, so a bound passes the truth exactly when the bet
    # against the truth has won: no bisection needed.
    lower = bounded_rejects(stats, truth, alpha, above=True)
    upper = bounded_rejects(stats, truth, alpha, above=False)
    return int(lower.any(axis=-1).sum()), int(upper.any(axis=-1).sum())


def _cohort_means(x: FloatArray, mask: BoolArray) -> MeanStats:
    n = np.cumsum(mask, axis=-1).astype(np.float64)
    v = np.where(mask, x, 0.0)
    return MeanStats(n, np.cumsum(v, axis=-1), np.cumsum(v * v, axis=-1))


def canary_latency(rng: Rng, runs: int, horizon: int, share: float) -> tuple[FloatArray, BoolArray]:
    """Log latency per request (shared 0.5 sd request effect, call noise, stalls) and cohort."""
    shape = (runs, horizon)
    cand = rng.random(shape) < share
    request = rng.normal(0.0, 0.5, shape)
    p = np.where(cand, 0.04, 0.01)
    stall = np.where(rng.random(shape) < p, 1.0 + 2.0 * rng.pareto(1.2, shape), 1.0)
    log_latency = request + rng.normal(0.0, 0.25, shape) + np.log(stall) + np.log(0.9) * cand
    return log_latency, cand


def canary_truth(seed: int) -> float:
    rng = np.random.default_rng(seed + 20_000)
    base = np.log(_stall(rng, (TRUTH_DRAWS,), 0.01))
    cand = np.log(_stall(rng, (TRUTH_DRAWS,), 0.04))
    return float(np.log(0.9) + cand.mean() - base.mean())


def two_mean_family(
    rng: Rng, runs: int, horizon: int, share: float, truth: float, alpha: float, n_opt: float
) -> tuple[int, int]:
    """Misses of `two_mean_interval` (canary latency) at every request."""
    x, cand = canary_latency(rng, runs, horizon, share)
    stats = TwoMeans(_cohort_means(x, ~cand), _cohort_means(x, cand))
    got = two_mean_interval(stats, alpha_lower=alpha, alpha_upper=alpha, n_opt=n_opt)
    return _misses(np.asarray(got.lower), np.asarray(got.upper), truth)


def paired_counts_family(
    rng: Rng, runs: int, horizon: int, worse: float, better: float, alpha: float
) -> tuple[int, int]:
    """Misses of the paired betting sequence (`diff_interval` on `PairedCounts`)."""
    u = rng.random((runs, horizon))
    stats = PairedCounts(
        np.broadcast_to(np.arange(1, horizon + 1, dtype=np.float64), u.shape),
        np.cumsum(u < worse, axis=-1).astype(np.float64),
        np.cumsum((u >= worse) & (u < worse + better), axis=-1).astype(np.float64),
    )
    truth = worse - better
    # The lower bound exceeds the truth exactly when the bet against it has won (and the
    # upper bound falls below it likewise): no bisection needed.
    lower = exceeds(stats, truth, alpha)
    upper = below(stats, truth, alpha)
    return int(lower.any(axis=-1).sum()), int(upper.any(axis=-1).sum())


def cohort_counts_family(
    rng: Rng, runs: int, horizon: int, share: float, rates: tuple[float, float], alpha: float
) -> tuple[int, int]:
    """Misses of the canary betting sequence (`diff_interval` on `CohortCounts`)."""
    shape = (runs, horizon)
    cand = rng.random(shape) < share
    bad = rng.random(shape) < np.where(cand, rates[1], rates[0])
    stats = CohortCounts(
        np.broadcast_to(np.arange(1, horizon + 1, dtype=np.float64), shape),
        np.cumsum(bad & cand, axis=-1).astype(np.float64),
        np.cumsum(bad & ~cand, axis=-1).astype(np.float64),
        share,
    )
    truth = rates[1] - rates[0]
    lower = exceeds(stats, truth, alpha)
    upper = below(stats, truth, alpha)
    return int(lower.any(axis=-1).sum()), int(upper.any(axis=-1).sum())


def two_counts_family(
    rng: Rng, runs: int, horizon: int, control: float, rates: tuple[float, float], alpha: float
) -> tuple[int, int]:
    """Misses of `two_proportion_interval` (greedy mismatch vs the control slice)."""
    shape = (runs, horizon)
    is_control = rng.random(shape) < control
    bad = rng.random(shape) < np.where(is_control, rates[0], rates[1])
    every = np.arange(9, horizon, 10)

    def counts(mask: BoolArray) -> CountStats:
        n = np.cumsum(mask, axis=-1)[..., every].astype(np.float64)
        k = np.cumsum(bad & mask, axis=-1)[..., every].astype(np.float64)
        return CountStats(n, k)

    stats = TwoCounts(counts(is_control), counts(~is_control))
    got = two_proportion_interval(stats, alpha_lower=alpha, alpha_upper=alpha)
    return _misses(np.asarray(got.lower), np.asarray(got.upper), rates[1] - rates[0])


def collapse_family(
    rng: Rng, runs: int, horizon: int, alpha: float, ratio: float = 0.5
) -> tuple[int, int]:
    """False alarms of the Shiryaev-Roberts collapse detector within `horizon` requests.

    Acceptance ~ Beta with mean 0.6 throughout (no collapse); the pre-change level is
    `ratio` x the mean of a 40-request warm-up, as in the gate (a segment's share of it).
    """
    warm = rng.beta(6.0, 4.0, (runs, 40)).mean(axis=-1, keepdims=True)
    rates = rng.beta(6.0, 4.0, (runs, horizon))
    path = log_sr_path(log_evalues(rates, ratio * warm))
    alarms = int((path.max(axis=-1) >= log_threshold(horizon, alpha)).sum())
    return alarms, 0


# The table ----------------------------------------------------------------------------


def run(runs: int, seed: int, alpha: float) -> list[Row]:
    """Return every scenario's row."""
    rng = np.random.default_rng(seed)
    rows: list[Row] = []

    def add(family: str, guarantee: str, scenario: str, horizon: int, got: tuple[int, int]) -> None:
        rows.append(Row(family, guarantee, scenario, horizon, runs, alpha, *got))

    latency = {
        "paired log-ratio, log-normal calls (light tails)": ratio_lognormal,
        "paired log-ratio, heavy-tailed stalls 1% / 4%": ratio_stalls,
        "paired log-ratio, 0.3 t(2) + 2% candidate stalls": ratio_t2,
    }
    for i, (name, draw) in enumerate(latency.items()):
        truth = _truth(draw, seed + i)
        for horizon, n_opt, where in ((2000, 1000.0, "pooled"), (400, 200.0, "segment")):
            x = draw(rng, (runs, horizon))
            got = mean_family(x, truth, alpha, n_opt)
            add("mean_interval (latency)", "asymptotic", f"{name}, {where}", horizon, got)
    acceptance = {
        "acceptance Beta(1, 9), mean 0.1": (acceptance_beta19, 0.1),
        "acceptance 25% zero + Beta(8, 2), mean 0.6": (acceptance_bimodal, 0.6),
        "acceptance 5% zero + Beta(18, 2), mean 0.855": (acceptance_rare_zero, 0.855),
    }
    for name, (draw, truth) in acceptance.items():
        for horizon in (60, 300):
            got = bounded_family(draw(rng, (runs, horizon)), truth, alpha)
            add("bounded_mean_interval (acceptance)", "exact", f"{name}, small n", horizon, got)
    truth = canary_truth(seed)
    for share in (0.5, 0.1):
        got = two_mean_family(rng, runs, 2000, share, truth, alpha, 1000.0)
        add(
            "two_mean_interval (canary latency)", "asymptotic",
            f"log latency, stalls 1% / 4%, candidate share {share}", 2000, got,
        )  # fmt: skip
    for worse, better in ((0.05, 0.02), (0.005, 0.001)):
        got = paired_counts_family(rng, runs, 3000, worse, better, alpha)
        add(
            "diff_interval, PairedCounts (betting)", "exact",
            f"paired 0/1: worse {worse}, better {better}", 3000, got,
        )  # fmt: skip
    for share in (0.5, 0.1):
        got = cohort_counts_family(rng, runs, 3000, share, (0.03, 0.05), alpha)
        add(
            "diff_interval, CohortCounts (betting, IPW)", "exact",
            f"canary rates 0.03 / 0.05, candidate share {share}", 3000, got,
        )  # fmt: skip
    got = two_counts_family(rng, runs, 3000, 0.2, (0.02, 0.04), alpha)
    add(
        "two_proportion_interval (betting x 2)", "exact",
        "greedy: 20% control at 0.02, candidate 0.04 (looks every 10)", 3000, got,
    )  # fmt: skip
    got = collapse_family(rng, runs, 3000, alpha)
    add(
        "Shiryaev-Roberts collapse detector", "exact",
        "no collapse, Beta(6, 4): false alarms (lower column)", 3000, got,
    )  # fmt: skip
    return rows


def main() -> None:
    """Print the table (and write JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--alpha", type=float, default=0.05, help="level of each side")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    t0 = time.perf_counter()
    rows = run(args.runs, args.seed, args.alpha)
    print(f"runs {args.runs}, seed {args.seed}, alpha {args.alpha} per side; miss rate [95% CP]")
    for row in rows:
        d = row.as_dict()
        sides = "  ".join(
            f"{side} {d[f'{side}_rate']:.4f} [{d[f'{side}_cp95'][0]:.4f}, "
            f"{d[f'{side}_cp95'][1]:.4f}]"
            for side in ("lower", "upper")
        )
        print(
            f"{row.guarantee:<10} {row.family:<42} {row.scenario:<58} n<={row.horizon:<5} {sides}"
        )
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([row.as_dict() for row in rows], handle, indent=2)


if __name__ == "__main__":
    main()
