"""The gate's statistics built from a fold state (`gate.stats.incremental`), as replay's.

`to_stats` turns the folded sums into the `GateStats` the rule reads: parity's sums of d in
units of the warm-up's scale, the load bands, and each cell's episode sums where an episode
holds two pairs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import reduce

from gate.db.enums import RolloutMode
from gate.stats import episode_sums
from gate.stats.change import CollapseState
from gate.stats.episode_sums import SidesSums
from gate.stats.gate_stats import BandStats, CellStats, GateStats
from gate.stats.ids import ALL, Cell, MetricId
from gate.stats.incremental import (
    EMPTY_MEAN,
    EMPTY_PAIRED,
    BandSums,
    Bucket,
    FoldState,
    folded,
    metrics,
    plus,
    zero,
)
from gate.stats.load_bands import band_labels
from gate.stats.policy import Policy
from gate.stats.registry import Family, Source, banded, collapse_segments, metric_id, tested
from gate.stats.sequences import MeanStats, PairedCounts, TwoCounts

_PARITY = {g.id for g in tested(RolloutMode.SHADOW) if g.source is Source.PARITY}


def to_stats(
    state: FoldState,
    policy: Policy,
    *,
    next_share: float | None = 1.0,
    feedback: Mapping[str, SidesSums] | None = None,
) -> GateStats:
    """Return the gate's statistics of the folded pairs (as `cumulative.to_stats` would);
    `next_share` as there (the load bands' hold). `feedback`: the thumbs-down cells' sums
    by segment, read beside the fold (`gate.verdicts.feedback`; None: no such cells)."""
    pooled = reduce(plus, state.buckets.values(), Bucket())
    cells: dict[tuple[str, str], CellStats] = {}
    for segment in (ALL, *policy.segments):
        b = pooled if segment == ALL else state.buckets.get(segment, Bucket())
        cells.update(_cells(state, policy, b, segment, seen=pooled.cells))
    enabled = policy.guardrails.acceptance.enabled
    collapse = {
        s: state.collapse.get(s, CollapseState()).max_log_sr for s in collapse_segments(policy)
    }
    elapsed = (state.last_at - state.first_at) if state.first_at and state.last_at else None
    control: dict[tuple[str, str], CellStats] = {
        Cell(metric_id(m), ALL): _control_cell(state, m, c) for m, c in state.control.items()
    }
    bands = _bands(state, policy, next_share)
    if state.shared:  # an episode holds two pairs: the episode is the unit, as in replay
        cells, control = _episodic(state, cells), _episodic(state, control, control=True)
        bands = bands and _episodic_bands(state, bands)
    if feedback is not None:
        cells.update(_feedback_cells(policy, feedback, episodic=state.shared))
    live = state.episodes.get(episode_sums.LIVE, {}).get(ALL, episode_sums.NONE)
    return GateStats(
        cells=cells,
        n_pairs=pooled.live,
        n_dropped=pooled.dropped,
        n_unmatched=pooled.unmatched,
        elapsed_s=elapsed.total_seconds() if elapsed else 0.0,
        warmed_up=state.pairs > policy.warmup_pairs,
        collapse=collapse if enabled else {},
        control=control,
        bands=bands,
        n_episodes=live.episodes if state.shared else None,
    )


def _feedback_cells(
    policy: Policy, sums: Mapping[str, SidesSums], *, episodic: bool
) -> dict[tuple[str, str], CellStats]:
    """Return the shadow thumbs-down cells (`Family.TWO_RATES`), per segment and pooled."""
    empty = SidesSums()
    return {
        Cell(MetricId(g.id), segment): sums.get(segment, empty).cell(episodic)
        for g in tested(RolloutMode.SHADOW)
        if g.source is Source.FEEDBACK
        for segment in g.segments(policy)
    }


def _episodic(
    state: FoldState, cells: Mapping[tuple[str, str], CellStats], *, control: bool = False
) -> dict[tuple[str, str], CellStats]:
    """Return the cells with their episode sums (means, paired counts and two proportions;
    others as they are)."""
    out = dict(cells)
    for (metric, segment), cell in cells.items():
        if isinstance(cell, TwoCounts) and not control:
            keys = episode_sums.side_keys(metric)
            base, cand = (state.episodes.get(k, {}).get(segment, episode_sums.NONE) for k in keys)
            out[Cell(metric_id(metric), segment)] = episode_sums.episodic_sides(cell, base, cand)
            continue
        if not isinstance(cell, MeanStats | PairedCounts):
            continue
        key = episode_sums.control_key(metric) if control else metric
        sums = state.episodes.get(key, {}).get(segment, episode_sums.NONE)
        if metric_id(metric).guardrail in _PARITY:
            sums = episode_sums.scaled(sums, _scale(state, metric))
        out[Cell(metric_id(metric), segment)] = episode_sums.episodic(cell, sums)
    return out


def _episodic_bands(state: FoldState, bands: BandStats) -> BandStats:
    """Return the load bands' gains with their episode sums (pooled)."""
    per = [state.episodes.get(episode_sums.band_key(i), {}) for i in range(len(bands.gain))]
    gains = [
        episode_sums.episodic(g, p.get(ALL, episode_sums.NONE))
        for g, p in zip(bands.gain, per, strict=True)
    ]
    return replace(bands, gain=tuple(g for g in gains if isinstance(g, MeanStats)))


def _control_cell(state: FoldState, metric: str, raw: CellStats) -> CellStats:
    """Return a control cell as the rule reads it (parity's sums of d in sd)."""
    return in_sd(raw, _scale(state, metric)) if isinstance(raw, MeanStats) else raw


def _bands(state: FoldState, policy: Policy, next_share: float | None) -> BandStats | None:
    """Return the load bands of the folded pairs (None: the policy has them off)."""
    g = banded(policy)
    if g is None or g.shadow is not Family.BAND:
        return None
    edges = policy.guardrails.load_bands.edges
    sums = state.bands or tuple(BandSums() for _ in range(len(edges) + 1))
    return BandStats(
        labels=band_labels(edges),
        gain=tuple(b.gain for b in sums),
        candidate_load=tuple(b.candidate_load for b in sums),
        baseline_load=tuple(b.baseline_load for b in sums),
        next_share=next_share,
    )


def in_sd(raw: MeanStats, scale: float | None) -> MeanStats:
    """Return sums of d as sums of z = d / scale (empty without a scale, as replay's NaN z)."""
    if scale is None:
        return EMPTY_MEAN
    return MeanStats(raw.n, raw.total / scale, raw.total_sq / (scale * scale))


def _scale(state: FoldState, metric: str) -> float | None:
    part = metric_id(metric).part
    return None if state.warmup is None or part is None else state.warmup.parity.get(part)


def _cells(
    state: FoldState, policy: Policy, b: Bucket, segment: str, *, seen: Mapping[str, CellStats]
) -> dict[tuple[str, str], CellStats]:
    cells: dict[tuple[str, str], CellStats] = {}
    for g in folded():
        if segment not in g.segments(policy):
            continue  # a pooled guardrail has no per-segment cells, as in replay
        for metric in metrics(g):
            raw = b.cells.get(metric, zero(g.shadow))
            if g.source is Source.EXACTNESS:
                if metric in seen:  # no side of a folded pair tested: no cell, as in replay
                    cells[Cell(metric, segment)] = raw
            elif g.source is not Source.PARITY:
                cells[Cell(metric, segment)] = raw
            elif metric in seen:  # no folded pair sampled: no cells, as in replay
                assert isinstance(raw, MeanStats), metric
                cells[Cell(metric, segment)] = in_sd(raw, _scale(state, metric))
    for name, per in state.evaluators.items():
        picked = per.values() if segment == ALL else [per.get(segment, EMPTY_PAIRED)]
        counts = reduce(plus, picked, EMPTY_PAIRED)
        cells[Cell(MetricId("eval", name), segment)] = replace(counts, n=counts.n + b.both_failed)
    return cells
