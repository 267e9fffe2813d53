"""Sum a demo's candidate exactness fields and judge them as the live gate's test does.

Reads the SQLite store of a `specgate demo --sampled` or `--fault biased-sampler` run
(`$SPECGATE_HOME/specgate.db`), sums the candidate calls' stored per-token exactness
fields (`generations.exactness`, `gate.exactness_fit.TokenFit.as_dict`) in call order and
prints, every `--every` calls, the tested tokens, the most-likely test's sums (off and
off_p, their per-token shift), and whether each part of `gate.stats.exactness` proves a
deviation beyond the margin (at the whole level alpha, as one pooled cell; the live gate
gives the guardrail its share of the policy's level, so this is a summary, not the verdict).

With `--resample RUNS`, also draws RUNS sequences of `--calls` calls with replacement from
the run's candidate calls and prints the calls each part of the test needs to prove the
deviation (looks every 10 calls): a projection from the real engine's own calls, for a
candidate whose demo run stops before its test decides.

The resampling also reports the most-likely test without the squares (`off_p2` absent)
and with the Poisson bound it used before them, for comparison.

Usage: python bench/exactness_tokens.py HOME/specgate.db [--every 50] [--margin 0.003]
       [--alpha A] [--resample 200 --calls 1500]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from dataclasses import replace

import numpy as np

from gate.exactness_fit import BINS
from gate.stats.exactness import (
    FIRST_BETS,
    FIRST_SHARE,
    TESTS,
    TokenBins,
    _any_set,
    _first_rejects,
    deviation,
)


def main() -> None:
    """Print the running sums and each test's state."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--margin", type=float, default=0.003)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--resample", type=int, default=0)
    parser.add_argument("--calls", type=int, default=1500)
    args = parser.parse_args()
    rows = sqlite3.connect(args.db).execute(
        "SELECT exactness FROM generations WHERE cohort = 'candidate' "
        "AND exactness IS NOT NULL ORDER BY started_at"
    )
    table = [[d["n"], d["cut"], d.get("off", 0), d.get("off_p", 0), d.get("off_p2", 0),
              *d["bins"]] for d in (json.loads(raw) for (raw,) in rows)]  # fmt: skip
    sums = np.zeros(5 + BINS)  # n, cut, off, off_p, off_p2, bins
    print("| calls | tested tokens | cut | off | off_p | shift per token | most-likely test | "
          "bin sets | deviation (TV est [lo, hi]) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    calls = 0
    for row in table:
        sums += row
        calls += 1
        if calls % args.every == 0:
            _row(calls, sums, args.margin, args.alpha)
    if calls % args.every:
        _row(calls, sums, args.margin, args.alpha)
    if args.resample:
        _resample(np.asarray(table), args)


def _resample(table: np.ndarray, args: argparse.Namespace) -> None:
    rng = np.random.default_rng(36)
    looks = np.arange(10, args.calls + 1, 10)
    picks = rng.integers(0, len(table), (args.resample, args.calls))
    cum = np.cumsum(table[picks], axis=1)[:, looks - 1]  # runs x looks x fields
    stats = TokenBins(cum[..., 0], cum[..., 1], tuple(cum[..., 5 + b] for b in range(BINS)),
                      cum[..., 2], cum[..., 3], cum[..., 4])  # fmt: skip
    each = FIRST_SHARE * args.alpha / 2.0
    first = _first_rejects(stats, args.margin, each, toward=True) | _first_rejects(
        stats, args.margin, each, toward=False
    )
    rest = _any_set(stats, args.margin, (1.0 - FIRST_SHARE) * args.alpha / TESTS, beyond=True)
    bare = replace(stats, off_p2=0.0)  # without the squares: the bound X^2 / n alone
    no_squares = _first_rejects(bare, args.margin, each, toward=True) | _first_rejects(
        bare, args.margin, each, toward=False
    )
    poisson = _poisson_rejects(stats, args.margin, each)
    for name, hit in (("most-likely test", first), ("bin sets", rest), ("either", first | rest),
                      ("most-likely test, squares not stored", no_squares),
                      ("most-likely test, Poisson bound (before)", poisson)):  # fmt: skip
        at = np.where(hit.any(axis=1), looks[hit.argmax(axis=1)], np.nan)
        done = np.isfinite(at)
        q = np.nanpercentile(at, [10, 50, 90]) if done.any() else [np.nan] * 3
        print(
            f"{name}: proven in {done.sum()}/{args.resample} runs within {args.calls} calls; "
            f"calls to prove, 10th/50th/90th percentile: {q[0]:.0f} / {q[1]:.0f} / {q[2]:.0f}"
        )


def _poisson_rejects(stats: TokenBins, margin: float, alpha: float) -> np.ndarray:
    """Return where the most-likely test as it was before the squares rejects (either way)."""
    n, z, r = (
        np.asarray(v, dtype=np.float64)[..., None] for v in (stats.n, stats.off, stats.off_p)
    )
    lam = FIRST_BETS
    out = np.zeros(np.shape(stats.n), dtype=bool)
    for log_cap in (-lam * z - np.expm1(-lam) * (r - n * margin),
                    lam * z - np.expm1(lam) * (r + n * margin)):  # fmt: skip
        top = log_cap.max(axis=-1)
        mean = top + np.log(np.exp(log_cap - top[..., None]).mean(axis=-1))
        out |= mean >= np.log(1.0 / alpha)
    return out


def _row(calls: int, sums: np.ndarray, margin: float, alpha: float) -> None:
    n, cut, off, off_p, off_p2 = (float(v) for v in sums[:5])
    stats = TokenBins(n, cut, tuple(float(b) for b in sums[5:]), off, off_p, off_p2)
    each = FIRST_SHARE * alpha / 2.0
    first = bool(_first_rejects(stats, margin, each, toward=True)) or bool(
        _first_rejects(stats, margin, each, toward=False)
    )
    rest = bool(_any_set(stats, margin, (1.0 - FIRST_SHARE) * alpha / TESTS, beyond=True))
    dev = deviation(stats, alpha).interval
    print(f"| {calls} | {n:.0f} | {cut:.0f} | {off:.0f} | {off_p:.1f} | "
          f"{(off_p - off) / max(n, 1.0):+.4f} | {'proven' if first else '-'} | "
          f"{'proven' if rest else '-'} | {float(dev.estimate):.3f} "
          f"[{float(dev.lower):.3f}, {float(dev.upper):.3f}] |")  # fmt: skip


if __name__ == "__main__":
    main()
