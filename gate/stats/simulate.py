"""Seeded simulation of the gate's operating characteristics.

Each scenario draws whole rollouts of pairs (`gate.stats.simulated_pairs`, where the
simulated pair is described), turns them into statistics at every look with the same code
replay uses, and applies the gate's rule (`rule.apply_rule`) to every look at once. A run's
outcome is its first decisive verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from scipy.stats import beta as beta_dist  # type: ignore[import-untyped]

from gate.stats.cumulative import looks_every, to_stats
from gate.stats.kayenta import kayenta_fails
from gate.stats.policy import Policy, at_stage, next_stage_share
from gate.stats.rule import Code, LookFlags, apply_rule
from gate.stats.sequences import FloatArray, IntArray
from gate.stats.simulated_pairs import Scenario, draw_pairs

# Memory per chunk of runs stays near this many pairs (about 30 float columns each).
CHUNK_PAIRS = 600_000


@dataclass(frozen=True)
class Outcomes:
    """What the gate did in each run: first decisive code and pairs it took."""

    scenario: Scenario
    codes: IntArray
    pairs_at: FloatArray
    kill_reasons: dict[str, int] = field(default_factory=dict)
    # Pairs at which the Kayenta-style judge first failed the run (NaN: never).
    kayenta: dict[str, FloatArray] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        """Return the number of simulated runs."""
        return int(self.codes.size)

    def count(self, code: Code, within: int | None = None) -> int:
        """Return runs whose first decisive verdict was `code` (within `within` pairs)."""
        hit = self.codes == code
        if within is not None:
            hit &= self.pairs_at <= within
        return int(hit.sum())

    def rate(self, code: Code, within: int | None = None) -> tuple[float, float, float]:
        """Return the rate of `code` with its 95% Clopper-Pearson interval."""
        return clopper_pearson(self.count(code, within), self.runs)

    def kayenta_rate(self, variant: str) -> tuple[float, float, float]:
        """Return the Kayenta judge's failure rate with its 95% CP interval."""
        return clopper_pearson(int(np.isfinite(self.kayenta[variant]).sum()), self.runs)


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float, float]:
    """Return k / n with its exact (Clopper-Pearson) two-sided interval."""
    tail = (1.0 - level) / 2
    lo = 0.0 if k == 0 else float(beta_dist.ppf(tail, k, n - k + 1))
    hi = 1.0 if k == n else float(beta_dist.ppf(1 - tail, k + 1, n - k))
    return k / n, lo, hi


def run_scenario(
    s: Scenario,
    policy: Policy,
    *,
    runs: int = 400,
    seed: int = 0,
    kayenta_every: int | None = None,
    stage: int = 0,
) -> Outcomes:
    """Simulate `runs` rollouts of scenario `s` under `policy` and record each verdict.

    (`run_stages` walks whole rollouts through the policy's stages.)

    With `kayenta_every`, the Kayenta-style judge also judges the same draws, looking
    every `kayenta_every` pairs, on the pairs as recorded and split into canary cohorts.
    Each run is one stage, `stage` (0-based), at that stage's share of alpha_kill.
    """
    policy = at_stage(policy, stage)
    rng = np.random.default_rng(seed)
    looks = looks_every(s.pairs, s.every)
    chunk = max(1, CHUNK_PAIRS // s.pairs)
    codes, at, reasons = [], [], dict[str, int]()
    kayenta: dict[str, list[FloatArray]] = {"paired": [], "split": []}
    for start in range(0, runs, chunk):
        cols = draw_pairs(s, policy, min(chunk, runs - start), rng)
        ev = apply_rule(policy, to_stats(cols, policy, looks, mode=s.mode))
        decisive = ev.code != Code.CONTINUE
        first = np.where(decisive.any(axis=-1), decisive.argmax(axis=-1), -1)
        rows = np.arange(first.size)
        codes.append(np.where(first >= 0, ev.code[rows, first], Code.CONTINUE))
        at.append(np.where(first >= 0, looks[first], np.nan))
        _count_reasons(ev, rows, first, codes[-1], reasons)
        if kayenta_every:
            for name in kayenta:
                failed = kayenta_fails(cols, every=kayenta_every, split=name == "split")
                hit = failed.any(axis=-1)
                pairs = (failed.argmax(axis=-1) + 1.0) * kayenta_every
                kayenta[name].append(np.where(hit, pairs, np.nan))
    judged = {k: np.concatenate(v) for k, v in kayenta.items() if v}
    return Outcomes(s, np.concatenate(codes), np.concatenate(at), reasons, judged)


def _count_reasons(
    ev: LookFlags, rows: IntArray, first: IntArray, codes: IntArray, reasons: dict[str, int]
) -> None:
    flags = [*ev.harmful.items(), *((("collapse", k), v) for k, v in ev.collapsed.items())]
    killed = (first >= 0) & (codes == Code.KILL)
    for key, flag in flags:
        fired = int((np.broadcast_to(flag, ev.code.shape)[rows, first] & killed).sum())
        if fired:
            name = ":".join(key)
            reasons[name] = reasons.get(name, 0) + fired


@dataclass(frozen=True)
class StagedOutcomes:
    """Whole shadow rollouts walked through the stages: where each run ended and when.

    `reached[i]`: pairs drawn before the run entered stage i (NaN: never entered);
    `final`: the run's end (`promoted` past the last stage, else the code that stopped
    it: kill, hold, or continue when a stage's pairs ran out undecided).
    """

    scenario: Scenario
    reached: FloatArray
    final: list[str]
    reasons: dict[str, int]

    @property
    def runs(self) -> int:
        """Return the number of simulated runs."""
        return len(self.final)

    def share(self, end: str) -> tuple[float, float, float]:
        """Return the share of runs that ended `end`, with its 95% CP interval."""
        return clopper_pearson(sum(f == end for f in self.final), self.runs)

    def reached_within(self, stage: int, pairs: float) -> tuple[float, float, float]:
        """Return the share of runs that entered `stage` within `pairs` pairs (95% CP)."""
        hit = np.isfinite(self.reached[:, stage]) & (self.reached[:, stage] <= pairs)
        return clopper_pearson(int(hit.sum()), self.runs)


def run_stages(s: Scenario, policy: Policy, *, runs: int = 400, seed: int = 0) -> StagedOutcomes:
    """Walk `runs` shadow rollouts of `s` through the policy's stages, `s.pairs` per stage.

    At stage i the candidate carries `stages[i]` percent of the traffic (its load that share
    of the baseline's), the rule runs at that stage's alpha_kill share and compares with the
    next stage's share; a promotion moves the run on, any other decision ends it.
    """
    rng = np.random.default_rng(seed)
    looks = looks_every(s.pairs, s.every)
    n_stages = len(policy.stages)
    reached = np.full((runs, n_stages), np.nan)
    reached[:, 0] = 0.0
    final = ["continue"] * runs
    reasons: dict[str, int] = {}
    active = np.arange(runs)
    for i, percent in enumerate(policy.stages):
        if not active.size:
            break
        staged = replace(s, share=percent / 100.0)
        at = at_stage(policy, i)
        cols = draw_pairs(staged, at, active.size, rng)
        stats = to_stats(
            cols, at, looks, mode=s.mode, next_share=next_stage_share(policy, i, s.mode)
        )
        ev = apply_rule(at, stats)
        decisive = ev.code != Code.CONTINUE
        first = np.where(decisive.any(axis=-1), decisive.argmax(axis=-1), -1)
        rows = np.arange(active.size)
        codes = np.where(first >= 0, ev.code[rows, first], Code.CONTINUE)
        held = np.broadcast_to(ev.untested_load, ev.code.shape)[rows, first] & (first >= 0)
        reasons["hold:load_untested"] = reasons.get("hold:load_untested", 0) + int(held.sum())
        promoted = codes == Code.PROMOTE
        for run, code in zip(active[~promoted], codes[~promoted], strict=True):
            final[run] = Code(int(code)).name.lower()
        moved = active[promoted]
        if i + 1 < n_stages:
            reached[moved, i + 1] = reached[moved, i] + looks[first[promoted]]
        else:
            for run in moved:
                final[run] = "promoted"
        active = moved
    return StagedOutcomes(s, reached, final, reasons)
