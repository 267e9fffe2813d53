"""The gate's decision rule, vectorised over any number of looks (and runs) at once.

`decide` (one look), `replay` (every look of a recorded rollout) and `simulate` (every
look of thousands of simulated rollouts) all call `apply_rule`, so the rule tested by
simulation is the rule that runs in production.

Rule, per look:
* kill when any guardrail x segment cell is proven inside its kill region (its lower
  bound, at alpha_kill / K, above `kill_at`; K is `registry.kill_slots`, one family more in
  canary mode for the cancel rate, so the union of all K tests has false-kill probability
  at most alpha_kill), or an acceptance collapse detector alarms (one per declared
  segment, one pooled over all requests, one pooled over undeclared segments; each takes
  one of the K shares);
* hold when the data cannot be trusted: the dropped share or a cohort's share proven
  past its limit (at alpha_kill / K);
* promote when minimum pairs and duration are met, the pooled primary gain is proven and
  every binding cell is proven inside its margin, each test at alpha_promote: an
  intersection-union test, so the false-promotion probability is at most alpha_promote;
* hold instead of promoting when the gain is proven only at loads well below the load
  the next stage brings (`load_gap`; policy `guardrails.load_bands`, on by default);
* hold at the maximum duration; otherwise continue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from gate.db.enums import RolloutMode
from gate.stats import exactness
from gate.stats.betting import (
    below,
    bet_rejects,
    bounded_mean_interval,
    bounded_rejects,
    diff_interval,
    exceeds,
    two_proportion_interval,
)
from gate.stats.exactness import TokenBins
from gate.stats.ids import ALL, EVAL_PREFIX, MetricId

__all__ = ["EVAL_PREFIX", "Code", "GateStats", "LookFlags", "apply_rule"]
from gate.stats.policy import Policy
from gate.stats.registry import (
    Family,
    Rule,
    Source,
    alpha_kill_each,
    banded,
    collapse_segments,
    guardrails,
    metric_id,
    rule_for,
)
from gate.stats.sequences import (
    BoolArray,
    CohortCounts,
    EpisodeCohorts,
    EpisodeCounts,
    EpisodeMean,
    FloatArray,
    IntArray,
    Interval,
    MeanStats,
    Num,
    PairedCounts,
    TwoCounts,
    TwoMeans,
    mean_interval,
    rate_cluster_interval,
    two_mean_interval,
)

TTFT_P50 = MetricId("ttft_p50")
TTFT_TAIL = MetricId("ttft_tail")
E2E_TAIL = MetricId("e2e_tail")
FAILURES = MetricId("failures")
# Canary only: client disconnects per cohort (not attributable to a route, yet a harm).
CANCELS = MetricId("cancels")
FEEDBACK = MetricId("feedback")
GREEDY = MetricId("greedy_mismatch")
ACCEPTANCE = MetricId("acceptance")
# Trust checks (dropped share, imbalance) wait for this many pairs.
TRUST_MIN_PAIRS = 100

CellStats = MeanStats | PairedCounts | TwoMeans | TwoCounts | CohortCounts | TokenBins


class Code(IntEnum):
    """Decisions as integers, for arrays."""

    CONTINUE = 0
    PROMOTE = 1
    KILL = 2
    HOLD = 3


@dataclass(frozen=True)
class BandStats:
    """The primary's paired log-ratio per band of the candidate's load, with load sums.

    Per band: `gain` (MeanStats of the clipped log-ratio), and the candidate's and the
    baseline's running requests summed over the same pairs (means: divide by `gain.n`).
    `next_share` is the candidate's traffic share once promoted (1.0 past the last stage;
    None: promoting this stage needs no proof at more load, `policy.next_stage_share`).
    """

    labels: tuple[str, ...]
    gain: tuple[MeanStats, ...]
    candidate_load: tuple[Num, ...]
    baseline_load: tuple[Num, ...]
    next_share: float | None = 1.0


@dataclass(frozen=True)
class GateStats:
    """Sufficient statistics of one stage after warm-up; fields broadcast together.

    `cells` maps (metric, segment) to statistics: latency metrics (`tpot`, `e2e`,
    `ttft_p50`) hold clipped log-ratios (`MeanStats`, shadow) or log latencies per cohort
    (`TwoMeans`, canary); rate metrics (tails, `failures`, `eval:<name>`, `feedback`) hold
    `PairedCounts` (shadow) or `CohortCounts` (canary; `cancels` exists in canary only),
    `EpisodeCounts` / `EpisodeCohorts` where pairs name episodes;
    `greedy_mismatch` holds `TwoCounts` (control slice vs candidate pairs); `acceptance`
    holds the candidate's per-request rates (`MeanStats`). Segment `all` pools every pair.
    `collapse` maps segments to the running maximum of the log Shiryaev-Roberts statistic.
    """

    cells: Mapping[tuple[str, str], CellStats]
    n_pairs: Num = 0.0
    n_dropped: Num = 0.0
    # Pairs left out as not load-matched (`policy.load_tolerance`), warm-up, dropped and
    # control pairs aside.
    n_unmatched: Num = 0.0
    elapsed_s: Num = 0.0
    warmed_up: bool | BoolArray = True
    collapse: Mapping[str, Num] = field(default_factory=dict)
    # Canary mode: requests served by each cohort and the candidate's expected share.
    cohort_counts: tuple[Num, Num] | None = None
    candidate_share: float = 0.5
    # The load bands (None: disabled, or no loads recorded).
    bands: BandStats | None = None
    # Control-slice cells (baseline vs baseline) of guardrails with a control alarm,
    # pooled, keyed like `cells`: the same test, a data-quality alarm when not null.
    control: Mapping[tuple[str, str], CellStats] = field(default_factory=dict)
    # Episodes among the tested pairs (a pair without one its own); None: no pair names one.
    n_episodes: Num | None = None


@dataclass(frozen=True)
class LookFlags:
    """Per-look outcome of the rule: decision codes and the flags behind them."""

    code: IntArray
    alpha_kill_each: float
    harmful: dict[tuple[str, str], BoolArray]
    inside: dict[tuple[str, str], BoolArray]
    binding: dict[tuple[str, str], BoolArray]
    collapsed: dict[str, BoolArray]
    gain: BoolArray
    enough: BoolArray
    untrusted_drops: BoolArray
    imbalanced: BoolArray
    timed_out: BoolArray
    # Promotion held: the gain is proven only at loads well below the next stage's.
    untested_load: BoolArray = field(default_factory=lambda: np.asarray(False))
    alarms: dict[tuple[str, str], BoolArray] = field(default_factory=dict)


def harm_interval(
    stats: CellStats, rule: Rule, *, alpha_kill: float, alpha_promote: float, n_opt: float
) -> Interval:
    """Return the harm interval: lower bound at the kill level, upper at promotion's.

    For acceptance (a floor) the harm is floor minus mean acceptance, bounded by betting on
    values in [0, 1] (exact). A two-sided rule's interval has each bound at half the kill
    level (the shift may go either way).
    """
    if isinstance(stats, TokenBins):
        return exactness.deviation(stats, alpha_kill).interval
    if rule.two_sided:
        alpha_promote = alpha_kill = alpha_kill / 2
    if isinstance(stats, MeanStats) and rule.floor is not None:
        acc = bounded_mean_interval(stats, alpha_lower=alpha_promote, alpha_upper=alpha_kill)
        lower, upper = np.asarray(acc.lower), np.asarray(acc.upper)
        if isinstance(stats, EpisodeMean):  # never narrower than the clustered interval
            clustered = mean_interval(
                stats, alpha_lower=alpha_promote, alpha_upper=alpha_kill, n_opt=n_opt
            )
            single = _each_alone(stats)
            lower = np.where(single, lower, np.minimum(lower, np.asarray(clustered.lower)))
            upper = np.where(single, upper, np.maximum(upper, np.asarray(clustered.upper)))
        return Interval(
            estimate=rule.floor - np.asarray(acc.estimate),
            lower=rule.floor - upper,
            upper=rule.floor - lower,
        )
    if isinstance(stats, MeanStats):
        return mean_interval(stats, alpha_lower=alpha_kill, alpha_upper=alpha_promote, n_opt=n_opt)
    if isinstance(stats, TwoMeans):
        return two_mean_interval(
            stats, alpha_lower=alpha_kill, alpha_upper=alpha_promote, n_opt=n_opt
        )
    if isinstance(stats, EpisodeCounts | EpisodeCohorts):
        clustered = rate_cluster_interval(
            stats, kill_at=rule.kill_at, margin=rule.margin,
            alpha_lower=alpha_kill, alpha_upper=alpha_promote, n_opt=n_opt,
        )  # fmt: skip
        alone = diff_interval(_pairs_of(stats), alpha_lower=alpha_kill, alpha_upper=alpha_promote)
        single = _every_pair_alone(stats)
        (est, a_lo, a_hi), (_, c_lo, c_hi) = _ends(alone), _ends(clustered)
        # With episodes, never narrower than the exact bet on independent pairs (requests,
        # in canary); the clustered interval's variance is floored at each end's threshold
        # (`rate_cluster_interval`: with no bad outcome it would be 0).
        # A cohort's pseudo-outcomes range beyond ±1; a rate difference does not.
        c_lo, c_hi = np.clip(c_lo, -1.0, 1.0), np.clip(c_hi, -1.0, 1.0)
        return Interval(
            estimate=est,
            lower=np.where(single, a_lo, np.minimum(a_lo, c_lo)),
            upper=np.where(single, a_hi, np.maximum(a_hi, c_hi)),
        )
    if isinstance(stats, PairedCounts | CohortCounts):
        return diff_interval(stats, alpha_lower=alpha_kill, alpha_upper=alpha_promote)
    return two_proportion_interval(stats, alpha_lower=alpha_kill, alpha_upper=alpha_promote)


def cell_n(stats: CellStats) -> FloatArray:
    """Return the number of observations behind a cell (the candidate's, if unpaired)."""
    if isinstance(stats, TwoMeans | TwoCounts):
        return np.asarray(stats.candidate.n, dtype=np.float64)
    return np.asarray(stats.n, dtype=np.float64)


def _check(
    stats: CellStats, rule: Rule, *, alpha_kill: float, alpha_promote: float, n_opt: float
) -> tuple[BoolArray, BoolArray]:
    if isinstance(stats, TokenBins):
        kill = rule.kill_at
        harmful = (
            exactness.harmful(stats, kill, alpha_kill)
            if np.isfinite(kill)
            else np.zeros(np.shape(stats.n), dtype=bool)
        )
        return harmful, exactness.inside(stats, rule.margin, alpha_promote)
    if rule.two_sided:
        return _two_sided(
            stats, rule, alpha_kill=alpha_kill, alpha_promote=alpha_promote, n_opt=n_opt
        )
    # Same answers as the intervals, without bisection: test at the thresholds.
    if isinstance(stats, EpisodeCounts | EpisodeCohorts):
        # The exact bet's own bounds are the tests below: only the clustered ones needed.
        got = rate_cluster_interval(
            stats, kill_at=rule.kill_at, margin=rule.margin,
            alpha_lower=alpha_kill, alpha_upper=alpha_promote, n_opt=n_opt,
        )  # fmt: skip
        single, pairs = _every_pair_alone(stats), _pairs_of(stats)
        bet_kill, bet_inside = (
            exceeds(pairs, rule.kill_at, alpha_kill),
            below(pairs, rule.margin, alpha_promote),
        )
        # With episodes both must hold: the exact bet and the clustered interval.
        return (
            np.where(single, bet_kill, bet_kill & (got.lower > rule.kill_at)),
            np.where(single, bet_inside, bet_inside & (got.upper < rule.margin)),
        )
    if isinstance(stats, PairedCounts | CohortCounts):
        return exceeds(stats, rule.kill_at, alpha_kill), below(stats, rule.margin, alpha_promote)
    if isinstance(stats, MeanStats) and rule.floor is not None:
        # Harm is floor minus the mean: killed when the mean is proven below the floor.
        below_floor = bounded_rejects(stats, rule.floor, alpha_kill, above=False)
        above_floor = bounded_rejects(stats, rule.floor, alpha_promote, above=True)
        if isinstance(stats, EpisodeMean):
            # With episodes both must hold: the exact bet and the clustered interval (a
            # hard conversation lowers every one of its requests' acceptance).
            got = harm_interval(
                stats, rule, alpha_kill=alpha_kill, alpha_promote=alpha_promote, n_opt=n_opt
            )
            single = _each_alone(stats)
            below_floor = np.where(single, below_floor, below_floor & (np.asarray(got.lower) > 0))
            above_floor = np.where(single, above_floor, above_floor & (np.asarray(got.upper) < 0))
        return below_floor, above_floor
    got = harm_interval(
        stats, rule, alpha_kill=alpha_kill, alpha_promote=alpha_promote, n_opt=n_opt
    )
    return np.asarray(got.lower) > rule.kill_at, np.asarray(got.upper) < rule.margin


def _pairs_of(stats: EpisodeCounts | EpisodeCohorts) -> PairedCounts | CohortCounts:
    """Return the counts alone, for the exact bet that treats each pair as independent."""
    if isinstance(stats, EpisodeCohorts):
        return CohortCounts(stats.n, stats.candidate, stats.baseline, stats.share)
    return PairedCounts(stats.n, stats.worse, stats.better)


def _every_pair_alone(stats: EpisodeCounts | EpisodeCohorts) -> BoolArray:
    """Return where every episode of the cell is one pair: there, the exact betting sequence
    on independent pairs; elsewhere the asymptotic one with episodes as the unit. Which
    one depends on how the pairs arrived, never on their outcomes."""
    return np.asarray(np.asarray(stats.difference.episodes) >= np.asarray(stats.n))


def _each_alone(stats: EpisodeMean) -> BoolArray:
    """Return where every episode of a mean's cell holds one value (see `_every_pair_alone`)."""
    return np.asarray(np.asarray(stats.episodes) >= np.asarray(stats.n))


def _ends(got: Interval) -> tuple[FloatArray, FloatArray, FloatArray]:
    return tuple(np.asarray(v, dtype=np.float64) for v in (got.estimate, got.lower, got.upper))  # type: ignore[return-value]


def _two_sided(
    stats: CellStats, rule: Rule, *, alpha_kill: float, alpha_promote: float, n_opt: float
) -> tuple[BoolArray, BoolArray]:
    """Return (proven beyond +-kill_at, proven within +-margin), each side at half a level."""
    if not isinstance(stats, MeanStats | TwoMeans):
        raise TypeError(f"a two-sided rule needs means, not {type(stats).__name__}")

    def interval(alpha: float) -> Interval:
        if isinstance(stats, MeanStats):
            return mean_interval(stats, alpha_lower=alpha, alpha_upper=alpha, n_opt=n_opt)
        return two_mean_interval(stats, alpha_lower=alpha, alpha_upper=alpha, n_opt=n_opt)

    kill, near = interval(alpha_kill / 2), interval(alpha_promote / 2)
    lo, hi = np.asarray(kill.lower), np.asarray(kill.upper)
    harmful = (lo > rule.kill_at) | (hi < -rule.kill_at)
    inside = (np.asarray(near.upper) < rule.margin) & (np.asarray(near.lower) > -rule.margin)
    return harmful, inside


def _gain(policy: Policy, stats: GateStats) -> BoolArray:
    pooled = stats.cells.get((policy.primary.metric, ALL))
    if not isinstance(pooled, MeanStats | TwoMeans):
        return np.asarray(False)
    upper = harm_interval(
        pooled,
        Rule(0.0, 0.0, True),
        alpha_kill=policy.alpha_promote,
        alpha_promote=policy.alpha_promote,
        n_opt=policy.n_opt(ALL),
    ).upper
    return np.asarray(np.asarray(upper) < np.log1p(-policy.primary.min_gain))


def _canary(stats: GateStats) -> bool:
    return stats.cohort_counts is not None


def _missing_required(policy: Policy, stats: GateStats) -> bool:
    # Promotion needs every required, enabled guardrail of the mode measured at least pooled.
    mode = RolloutMode.CANARY if _canary(stats) else RolloutMode.SHADOW
    needed: list[str] = [policy.primary.metric]
    for g in guardrails():
        family = g.family(mode)
        if family is None or family is Family.COLLAPSE or g.source is Source.EVALUATOR:
            continue
        rule = rule_for(policy, g.id, ALL)
        if rule is not None and rule.required and g.source not in _OPTIONAL_SOURCES:
            needed.append(g.id)
    return any((metric, ALL) not in stats.cells for metric in needed)


# Sources whose cells exist only once such data arrived (their guardrails bind then).
_OPTIONAL_SOURCES = (Source.FEEDBACK, Source.GREEDY)


def apply_rule(policy: Policy, stats: GateStats) -> LookFlags:
    """Apply the gate's rule to every look in `stats` at once."""
    evaluators = {m for m, _ in stats.cells if metric_id(m).evaluator is not None}
    alpha_each = alpha_kill_each(policy, len(evaluators), canary=_canary(stats))
    harmful, inside, binding = {}, {}, {}
    for key, cell in stats.cells.items():
        rule = rule_for(policy, *key)
        if rule is None:
            continue
        harmful[key], inside[key] = _check(
            cell,
            rule,
            alpha_kill=alpha_each,
            alpha_promote=policy.alpha_promote,
            n_opt=policy.n_opt(key[1]),
        )
        has_data = cell_n(cell) > 0
        binding[key] = has_data | (rule.required and key[1] == ALL)
    threshold = np.log(policy.guardrails.acceptance.collapse_horizon / alpha_each)
    detectors = set(collapse_segments(policy)) if policy.guardrails.acceptance.enabled else set()
    collapsed = {
        seg: np.asarray(np.asarray(v) >= threshold)
        for seg, v in stats.collapse.items()
        if seg in detectors
    }
    flags = _combine(policy, stats, alpha_each, (harmful, inside, binding), collapsed)
    for key, cell in stats.control.items():
        rule = rule_for(policy, *key)
        if rule is not None:
            alarm, _ = _check(
                cell, rule, alpha_kill=alpha_each, alpha_promote=policy.alpha_promote,
                n_opt=policy.n_opt(key[1]),
            )  # fmt: skip
            flags.alarms[key] = np.asarray(np.asarray(stats.warmed_up) & alarm)
    return flags


def _combine(
    policy: Policy,
    stats: GateStats,
    alpha_each: float,
    flags: tuple[dict[tuple[str, str], BoolArray], ...],
    collapsed: dict[str, BoolArray],
) -> LookFlags:
    harmful, inside, binding = flags
    false = np.asarray(False)
    warm = np.asarray(stats.warmed_up)
    n_pairs, n_dropped = np.asarray(stats.n_pairs), np.asarray(stats.n_dropped)
    kill = warm & _any([*harmful.values(), *collapsed.values()], false)
    seen = n_pairs + n_dropped
    # Trust checks hold only on evidence (the share proven past its limit), so a few
    # early drops or an unlucky split do not stop a rollout.
    too_many = _share_beyond(seen, n_dropped, policy.max_dropped_share, alpha_each, above=True)
    drops = warm & (seen >= TRUST_MIN_PAIRS) & too_many
    imbalanced = false
    if stats.cohort_counts is not None:
        base, cand = (np.asarray(c, dtype=np.float64) for c in stats.cohort_counts)
        w, tol = stats.candidate_share, policy.max_cohort_imbalance
        off = _share_beyond(base + cand, cand, w * (1 + tol), alpha_each, above=True)
        off |= _share_beyond(base + cand, cand, w * (1 - tol), alpha_each, above=False)
        imbalanced = warm & (base + cand >= TRUST_MIN_PAIRS) & off
    elapsed = np.asarray(stats.elapsed_s)
    enough = (n_pairs >= policy.min_pairs) & (elapsed >= policy.min_duration_s)
    gain = _gain(policy, stats)
    proven = _all([inside[k] | ~binding[k] for k in inside], np.asarray(True))
    ready = warm & enough & gain & proven & (not _missing_required(policy, stats))
    untested = ready & load_gap(policy, stats).untested
    ready = ready & ~untested
    timed_out = elapsed >= policy.max_duration_s
    code = np.select(
        [kill, drops | imbalanced, ready, untested | timed_out],
        [Code.KILL, Code.HOLD, Code.PROMOTE, Code.HOLD],
        default=Code.CONTINUE,
    ).astype(np.int64)
    return LookFlags(
        code=code, alpha_kill_each=alpha_each, harmful=harmful, inside=inside,
        binding=binding, collapsed=collapsed, gain=gain, enough=enough,
        untrusted_drops=drops, imbalanced=imbalanced, timed_out=timed_out,
        untested_load=untested,
    )  # fmt: skip


@dataclass(frozen=True)
class LoadGap:
    """Where the gain is proven against the load the next stage brings (running requests).

    `proven_load`: the highest mean candidate load at which the gain is proven (the pooled
    mean, or a band's whose own gain is proven); `target`: next share x the baseline's
    mean load; `untested`: the hold applies (proven load below target - max_gap x baseline).
    """

    proven_load: FloatArray
    target: FloatArray
    baseline: FloatArray
    untested: BoolArray


def band_intervals(policy: Policy, bands: BandStats) -> list[Interval]:
    """Return each band's log-ratio interval, both bounds at alpha_promote."""
    return [
        mean_interval(
            g,
            alpha_lower=policy.alpha_promote,
            alpha_upper=policy.alpha_promote,
            n_opt=policy.n_opt(ALL) / len(bands.gain),
        )
        for g in bands.gain
    ]


def load_gap(policy: Policy, stats: GateStats) -> LoadGap:
    """Return where the gain is proven, against the load the next stage will bring."""
    b, nothing = stats.bands, np.asarray(np.nan)
    if b is None or banded(policy) is None or b.next_share is None:
        return LoadGap(nothing, nothing, nothing, np.asarray(False))
    n = _total([g.n for g in b.gain])
    some = n > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        base = _total(list(b.baseline_load)) / n
        proven = _total(list(b.candidate_load)) / n  # the pooled gain's load
        goal = np.log1p(-policy.primary.min_gain)
        for g, load, got in zip(b.gain, b.candidate_load, band_intervals(policy, b), strict=True):
            m = np.asarray(g.n, dtype=np.float64)
            here = np.asarray(load, dtype=np.float64) / m
            shown = (m > 0) & (np.asarray(got.upper) < goal)
            proven = np.where(shown, np.fmax(proven, here), proven)
    target = b.next_share * base
    cfg = policy.guardrails.load_bands
    untested = some & cfg.hold_untested_load & (proven < target - cfg.max_gap * base)
    return LoadGap(proven, target, base, np.asarray(untested))


def _total(values: list[Num]) -> FloatArray:
    out = np.asarray(0.0)
    for v in values:
        out = out + np.asarray(v, dtype=np.float64)
    return out


def _share_beyond(n: Num, k: Num, m: float, alpha: float, *, above: bool) -> BoolArray:
    if not 0.0 < m < 1.0:
        return np.zeros(np.shape(n), dtype=bool)
    counts = [np.asarray(n, dtype=np.float64) - k, np.asarray(k, dtype=np.float64)]
    return bet_rejects([0.0, 1.0], counts, m, alpha, above=above)


def _any(flags: list[BoolArray], empty: BoolArray) -> BoolArray:
    out = empty
    for flag in flags:
        out = out | flag
    return out


def _all(flags: list[BoolArray], empty: BoolArray) -> BoolArray:
    out = empty
    for flag in flags:
        out = out & flag
    return out
