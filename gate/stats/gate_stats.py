"""The statistics the rule reads at each look: `GateStats`, its cells and its load bands.

Every path builds them (`gate.stats.cumulative` from columns, `gate.stats.fold_stats` from a
fold state) and `gate.stats.rule.apply_rule` judges them; fields broadcast over looks (and
runs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gate.stats.exactness import TokenBins
from gate.stats.sequences import (
    BoolArray,
    CohortCounts,
    MeanStats,
    Num,
    PairedCounts,
    TwoCounts,
    TwoMeans,
)

CellStats = MeanStats | PairedCounts | TwoMeans | TwoCounts | CohortCounts | TokenBins


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
    (`TwoMeans`, canary); rate metrics (tails, `failures`, `eval:<name>`, canary `feedback`) hold
    `PairedCounts` (shadow) or `CohortCounts` (canary; `cancels` exists in canary only),
    `EpisodeCounts` / `EpisodeCohorts` where pairs name episodes;
    `greedy_mismatch` (and shadow `feedback`) holds `TwoCounts` (control slice vs
    candidate pairs), `EpisodeTwoCounts` where pairs name episodes; `acceptance`
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
