"""The gate's sufficient statistics kept incrementally: fold state, what a fold adds, GateStats.

On Postgres the gate does not recompute a stage's statistics from all of its pairs at
every look. Each pair is folded into a stored state once, after its evaluations landed,
in fold order (`evaluated_at`, `id`; see `gate.pairs.watermark`), and `GateStats` are
built from the state. What is kept is additive (counts, sums, sums of squares per
metric x segment) except the acceptance-collapse detectors, which advance over the new
pairs in fold order (`gate.stats.change.update`), and what the warm-up fixes.
Sampled-output parity cells hold raw sums of each pair's stored difference d
(`gate.pairs.parity`): n, sum d and sum d^2; the warm-up fixes each statistic's scale, and
`to_stats` divides (sum z = sum d / scale, sum z^2 = sum d^2 / scale^2), as replay's z.
The load bands (`BandSums`, pooled) hold per band of the candidate's stamped load
(`gate.pairs.load`) the primary's clipped log-ratio (n, sum, sum of squares) and both
routes' loads summed over the same live pairs, as `gate.stats.load_bands` builds them.

Warm-up: the first `policy.warmup_pairs` pairs *in fold order*, not in creation order,
so a pair's role is known when it is folded and never revisited. Replay and export use
the same order (`gate.stats.replay`), so both paths give the same statistics. Pairs of
undeclared segments count only in the pooled cells; they share the bucket `all`.
Not folded: user feedback (it arrives after the fold), canary mode (unpaired cohorts).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from datetime import datetime
from functools import reduce
from typing import Any, TypeVar

import numpy as np

from gate.db.enums import RolloutMode
from gate.parity import STATISTICS
from gate.stats import episode_sums
from gate.stats.change import CollapseState, log_evalues, update
from gate.stats.episode_sums import Sums
from gate.stats.exactness import TokenBins
from gate.stats.ids import ALL, Cell, MetricId
from gate.stats.load_bands import band_labels
from gate.stats.policy import Policy
from gate.stats.registry import (
    Family,
    Guardrail,
    Source,
    banded,
    collapse_segments,
    metric_id,
    tested,
)
from gate.stats.rule import BandStats, CellStats, GateStats
from gate.stats.sequences import CountStats, FloatArray, MeanStats, PairedCounts, TwoCounts

# Bump when what a fold stores changes meaning: stored states then refold from scratch.
# 2: pooled and undeclared collapse detectors; 3: sampled-output parity; 4: load bands;
# 5: parity's text statistics on every eligible pair, no mean log-prob scale after partial
# log-probabilities; 6: per-token exactness; 7: pairs left out as not load-matched;
# 8: episode sums; 9: the loop guardrail's baseline side (its answer collapsed against the
# candidate's).
FOLD_VERSION = 9
# The bucket of pairs whose segment the policy does not declare ("all" is never declared).
POOLED_ONLY = ALL
Key = tuple[datetime, uuid.UUID]
T = TypeVar("T")

_MEAN = MeanStats(0.0, 0.0, 0.0)
_PAIRED = PairedCounts(0.0, 0.0, 0.0)
_COUNT = CountStats(0.0, 0.0)


class Bucket:
    """Additive statistics of one segment's folded pairs.

    `live` pairs are tested (after warm-up, neither control nor dropped, load-matched when
    judged so: `policy.load_tolerance`); `dropped` counts pairs dropped after warm-up;
    `unmatched` the pairs after warm-up left out as not load-matched; `both_failed` live
    pairs where both sides failed, a tie for every evaluator, even one first seen later.
    `cells` holds each folded guardrail's statistics by guardrail id (latency means hold
    clipped log-ratios); a cell is also an attribute (`bucket.tpot`) and a keyword of the
    constructor. A guardrail of several metrics keys each by its metric id
    (`parity:length`); those cells exist once a folded pair carried sampling settings
    (replay has no parity cells before either).
    """

    __slots__ = ("both_failed", "cells", "dropped", "live", "unmatched")

    def __init__(
        self,
        live: float = 0.0,
        dropped: float = 0.0,
        both_failed: float = 0.0,
        cells: Mapping[str, CellStats] | None = None,
        *,
        unmatched: float = 0.0,
        **named: CellStats,
    ) -> None:
        self.live, self.dropped, self.both_failed = float(live), float(dropped), float(both_failed)
        self.unmatched = float(unmatched)
        self.cells: Mapping[str, CellStats] = {**(cells or {}), **named}

    def __getattr__(self, name: str) -> CellStats:
        try:
            return self.cells[name]
        except KeyError:
            raise AttributeError(name) from None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Bucket):
            return NotImplemented
        return self._parts() == other._parts()

    def __hash__(self) -> int:
        return hash((self.live, self.dropped, self.both_failed, self.unmatched))

    def __repr__(self) -> str:
        return f"Bucket(live={self.live}, dropped={self.dropped}, cells={dict(self.cells)})"

    def _parts(self) -> tuple[float, float, float, float, dict[str, CellStats]]:
        return (self.live, self.dropped, self.both_failed, self.unmatched, dict(self.cells))

    def with_cells(self, cells: Mapping[str, CellStats]) -> Bucket:
        """Return the bucket with `cells` added (replacing any of the same name)."""
        merged = {**self.cells, **cells}
        return Bucket(self.live, self.dropped, self.both_failed, merged, unmatched=self.unmatched)

    def __add__(self, other: Bucket) -> Bucket:
        return Bucket(
            self.live + other.live,
            self.dropped + other.dropped,
            self.both_failed + other.both_failed,
            _merge(self.cells, other.cells),
            unmatched=self.unmatched + other.unmatched,
        )


@dataclass(frozen=True)
class Tail:
    """A tail threshold per declared segment with warm-up data, and the pooled one."""

    segments: Mapping[str, float]
    pooled: float | None


@dataclass(frozen=True)
class WarmUp:
    """What the warm-up fixes: tail thresholds, each collapse detector's level, and each
    parity statistic's scale (the sd of d; absent: none, its cells stay empty).

    Tail thresholds by exceedance guardrail: `ttft` and `e2e` (the stored names of
    `ttft_tail` and `e2e_tail`), `tails` for any other.
    """

    ttft: Tail
    e2e: Tail
    levels: Mapping[str, float]
    tails: Mapping[str, Tail] = field(default_factory=dict)
    parity: Mapping[str, float] = field(default_factory=dict)

    def tail(self, guardrail: str) -> Tail | None:
        """Return the tail threshold of an exceedance guardrail (None: none yet)."""
        named = {"ttft_tail": self.ttft, "e2e_tail": self.e2e}
        return named.get(guardrail, self.tails.get(guardrail))


@dataclass(frozen=True)
class BandSums:
    """One load band's live pairs: the primary's clipped log-ratio and both routes' loads."""

    gain: MeanStats = _MEAN
    candidate_load: float = 0.0
    baseline_load: float = 0.0


@dataclass(frozen=True)
class FoldState:
    """A stage's statistics over every pair folded so far, up to `watermark`."""

    policy_key: str
    watermark: Key | None = None
    pairs: int = 0
    warm_pairs: int = 0
    first_at: datetime | None = None
    last_at: datetime | None = None
    warmup: WarmUp | None = None
    buckets: Mapping[str, Bucket] = field(default_factory=dict)
    # Evaluator -> bucket -> paired counts, both-failed ties left out (see `Bucket`).
    evaluators: Mapping[str, Mapping[str, PairedCounts]] = field(default_factory=dict)
    collapse: Mapping[str, CollapseState] = field(default_factory=dict)
    # Control cells by metric, pooled: the control slice's parity sums of d (see
    # `Bucket`), and the baseline's own tokens' exactness (`TokenBins`).
    control: Mapping[str, CellStats] = field(default_factory=dict)
    # The load bands' sums, one per band of `guardrails.load_bands.edges` (pooled).
    bands: tuple[BandSums, ...] = ()
    # Each cell's episode sums (`gate.stats.episode_sums`), and whether an episode of the
    # stage holds two pairs (until then the cells are those of independent pairs).
    episodes: Sums = field(default_factory=dict)
    shared: bool = False


@dataclass(frozen=True)
class Delta:
    """What one fold adds: the pairs after the watermark up to `last`, in fold order."""

    last: Key
    pairs: int
    warm_pairs: int
    first_at: datetime | None
    last_at: datetime | None
    buckets: Mapping[str, Bucket]
    evaluators: Mapping[str, Mapping[str, PairedCounts]]
    # Live pairs' acceptance rates per declared segment, in fold order.
    acceptance: Mapping[str, FloatArray]
    control: Mapping[str, CellStats] = field(default_factory=dict)
    bands: tuple[BandSums, ...] = ()
    # Pairs of the slice that name an episode; what the slice adds to the episode sums
    # (`gate.verdicts.episodes`), and whether an episode of the stage now holds two pairs.
    named: int = 0
    episodes: Sums = field(default_factory=dict)
    shared: bool = False


def policy_key(policy: Policy, load_match: float | None = None) -> str:
    """Return a hash of the policy fields that folded statistics depend on, and of the
    load tolerance the pairs are judged within (`policy.load_tolerance`; None: all)."""
    g = policy.guardrails
    parts = [
        FOLD_VERSION,
        load_match,
        policy.warmup_pairs,
        policy.segments,
        g.ttft_tail.quantile,
        g.e2e_tail.quantile,
        g.acceptance.collapse_ratio,
        g.greedy_mismatch.evaluator,
        g.output_parity.min_scale_pairs,
        g.load_bands.edges,
        policy.primary.metric,
        # What each folded guardrail computes: adding or changing one refolds.
        [[r.id, r.source, r.shadow, r.quantile(policy) if r.quantile else None] for r in folded()],
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def plus(a: T, b: T) -> T:
    """Return the sum of two additive statistics (dataclasses field by field)."""
    return _plus(a, b)


def _plus(a: T, b: T) -> T:
    if isinstance(a, tuple):  # per-bin sums (exactness): bin by bin
        assert isinstance(b, tuple)
        return tuple(_plus(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[return-value]
    if is_dataclass(a) and not isinstance(a, type):
        values = {f.name: _plus(getattr(a, f.name), getattr(b, f.name)) for f in fields(a)}
        return type(a)(**values)
    return a + b  # type: ignore[operator, no-any-return]


def _merge(a: Mapping[str, T], b: Mapping[str, T]) -> dict[str, T]:
    out = dict(a)
    for key, value in b.items():
        out[key] = _plus(out[key], value) if key in out else value
    return out


def _bound(
    a: datetime | None, b: datetime | None, pick: Callable[[list[datetime]], datetime]
) -> datetime | None:
    known = [t for t in (a, b) if t is not None]
    return pick(known) if known else None


def add(state: FoldState, delta: Delta) -> FoldState:
    """Return the state with the delta's pairs folded in."""
    collapse = dict(state.collapse)
    for segment, rates in delta.acceptance.items():
        if rates.size:
            # Live pairs exist only after the warm-up, which fixed every level.
            assert state.warmup is not None
            log_e = log_evalues(rates, state.warmup.levels[segment])
            collapse[segment] = update(collapse.get(segment, CollapseState()), log_e)
    evaluators = {name: dict(per) for name, per in state.evaluators.items()}
    for name, per in delta.evaluators.items():
        evaluators[name] = _merge(evaluators.get(name, {}), per)
    return replace(
        state,
        watermark=delta.last,
        pairs=state.pairs + delta.pairs,
        warm_pairs=state.warm_pairs + delta.warm_pairs,
        first_at=_bound(state.first_at, delta.first_at, min),
        last_at=_bound(state.last_at, delta.last_at, max),
        buckets=_merge(state.buckets, delta.buckets),
        evaluators=evaluators,
        collapse=collapse,
        control=_merge(state.control, delta.control),
        bands=tuple(map(_plus, state.bands, delta.bands)) if state.bands else delta.bands,
        episodes=episode_sums.merge(state.episodes, delta.episodes),
        shared=state.shared or delta.shared,
    )


def to_stats(state: FoldState, policy: Policy, *, next_share: float | None = 1.0) -> GateStats:
    """Return the gate's statistics of the folded pairs (as `cumulative.to_stats` would);
    `next_share` as there (the load bands' hold)."""
    pooled = reduce(_plus, state.buckets.values(), Bucket())
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


def _episodic(
    state: FoldState, cells: Mapping[tuple[str, str], CellStats], *, control: bool = False
) -> dict[tuple[str, str], CellStats]:
    """Return the cells with their episode sums (means and paired counts; others as they are)."""
    out = dict(cells)
    for (metric, segment), cell in cells.items():
        if isinstance(cell, TwoCounts) or not isinstance(cell, MeanStats | PairedCounts):
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


def folded() -> list[Guardrail]:
    """Return the shadow guardrails the fold keeps in buckets (evaluators and user
    feedback aside: evaluators are kept per name, feedback arrives after the fold)."""
    return [g for g in tested(RolloutMode.SHADOW) if g.source not in _NOT_IN_BUCKETS]


_NOT_IN_BUCKETS = (Source.EVALUATOR, Source.FEEDBACK)
_PARITY = {g.id for g in tested(RolloutMode.SHADOW) if g.source is Source.PARITY}


def metrics(g: Guardrail) -> list[MetricId]:
    """Return a folded guardrail's metrics: one per answer statistic for parity, else one."""
    if g.source is Source.PARITY:
        return [MetricId(g.id, stat) for stat in STATISTICS]
    return [MetricId(g.id)]


def in_sd(raw: MeanStats, scale: float | None) -> MeanStats:
    """Return sums of d as sums of z = d / scale (empty without a scale, as replay's NaN z)."""
    if scale is None:
        return _MEAN
    return MeanStats(raw.n, raw.total / scale, raw.total_sq / (scale * scale))


def _scale(state: FoldState, metric: str) -> float | None:
    part = metric_id(metric).part
    return None if state.warmup is None or part is None else state.warmup.parity.get(part)


def zero(family: Family | None) -> CellStats:
    """Return the empty statistics of a family's cell."""
    if family in (Family.PAIRED_DIFFERENCE, Family.EXCEEDANCE):
        return _PAIRED
    if family is Family.TWO_RATES:
        return TwoCounts(_COUNT, _COUNT)
    if family is Family.TOKEN_PIT:
        return TokenBins.empty()
    return _MEAN


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
        picked = per.values() if segment == ALL else [per.get(segment, _PAIRED)]
        counts = reduce(_plus, picked, _PAIRED)
        cells[Cell(MetricId("eval", name), segment)] = replace(counts, n=counts.n + b.both_failed)
    return cells


def dump(value: Any) -> Any:
    """Return a JSON-ready copy of state parts (dataclasses, maps, floats; -inf as null)."""
    if isinstance(value, Bucket):
        parts = {"live": value.live, "dropped": value.dropped, "both_failed": value.both_failed}
        parts["unmatched"] = value.unmatched
        return {**parts, "cells": dump(value.cells)}
    if isinstance(value, TokenBins):
        bins = [float(b) for b in value.bins]
        return {"n": float(value.n), "cut": float(value.cut), "bins": bins,
                "off": float(value.off), "off_p": float(value.off_p),
                "off_p2": float(value.off_p2)}  # fmt: skip
    if is_dataclass(value) and not isinstance(value, type):
        return dump(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): dump(v) for k, v in value.items()}
    if isinstance(value, float | np.floating) and not np.isfinite(value):
        return None  # JSONB has no infinities; only the collapse statistic's -inf occurs
    return float(value) if isinstance(value, np.floating) else value


def _number(raw: float | None) -> float:
    return -np.inf if raw is None else float(raw)


def _numbers(doc: Mapping[str, Any]) -> dict[str, float]:
    return {key: float(value) for key, value in doc.items()}


def load_buckets(doc: Mapping[str, Any] | None) -> dict[str, Bucket]:
    """Return buckets from their `dump`; absent cells are empty."""
    families = {g.id: g.shadow for g in folded()}
    out = {}
    for segment, raw in (doc or {}).items():
        cells = {
            name: _load_cell(families.get(metric_id(name).guardrail), value)
            for name, value in raw.get("cells", {}).items()
        }
        unmatched = raw.get("unmatched", 0.0)
        out[segment] = Bucket(
            raw["live"], raw["dropped"], raw["both_failed"], cells, unmatched=unmatched
        )
    return out


def _load_cell(family: Family | None, raw: Mapping[str, Any]) -> CellStats:
    kind = type(zero(family))
    if kind is TokenBins:
        return _load_bins(raw)
    if kind is TwoCounts:
        return TwoCounts(*(CountStats(**_numbers(raw[side])) for side in ("baseline", "candidate")))
    return kind(**_numbers(raw))  # type: ignore[arg-type]


def load_evaluators(doc: Mapping[str, Any] | None) -> dict[str, dict[str, PairedCounts]]:
    """Return evaluator counts from their `dump`."""
    return {
        name: {segment: PairedCounts(**_numbers(raw)) for segment, raw in per.items()}
        for name, per in (doc or {}).items()
    }


def load_collapse(doc: Mapping[str, Any] | None) -> dict[str, CollapseState]:
    """Return the collapse detectors from their `dump`."""
    return {
        segment: CollapseState(int(raw["n"]), _number(raw["log_sr"]), _number(raw["max_log_sr"]))
        for segment, raw in (doc or {}).items()
    }


def load_control(doc: Mapping[str, Any] | None) -> dict[str, CellStats]:
    """Return the control cells from their `dump`."""
    return {
        metric: _load_bins(raw) if "bins" in raw else MeanStats(**_numbers(raw))
        for metric, raw in (doc or {}).items()
    }


def _load_bins(raw: Mapping[str, Any]) -> TokenBins:
    bins = tuple(float(b) for b in raw["bins"])
    # Dumped before the most-likely test's sums: 0 and 0, its capital unmoved.
    off, off_p, off_p2 = (float(raw.get(k, 0.0)) for k in ("off", "off_p", "off_p2"))
    return TokenBins(float(raw["n"]), float(raw["cut"]), bins, off, off_p, off_p2)


def load_bands(doc: list[Any] | None) -> tuple[BandSums, ...]:
    """Return the load bands' sums from their `dump` (none folded: empty)."""
    return tuple(
        BandSums(
            MeanStats(**_numbers(raw["gain"])),
            float(raw["candidate_load"]),
            float(raw["baseline_load"]),
        )
        for raw in doc or []
    )


def load_warmup(doc: Mapping[str, Any] | None) -> WarmUp | None:
    """Return what the warm-up fixed, from its `dump` (None before the warm-up ended)."""
    if doc is None:
        return None

    def tail(raw: Mapping[str, Any]) -> Tail:
        pooled = raw["pooled"]
        return Tail(_numbers(raw["segments"]), None if pooled is None else float(pooled))

    tails = {name: tail(raw) for name, raw in doc.get("tails", {}).items()}
    scales = _numbers(doc.get("parity", {}))
    return WarmUp(tail(doc["ttft"]), tail(doc["e2e"]), _numbers(doc["levels"]), tails, scales)
