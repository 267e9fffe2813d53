"""The gate's sufficient statistics kept incrementally: the fold state and what a fold adds.

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
Not folded: user feedback (it arrives after the fold; the live gate reads it at each look,
`gate.verdicts.feedback`), canary mode (unpaired cohorts).
The statistics the rule reads are built from a state in `gate.stats.fold_stats`; the
state's stored JSON documents are written and read in `gate.stats.fold_json`.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from datetime import datetime
from typing import TypeVar

from gate.db.enums import RolloutMode
from gate.parity import STATISTICS
from gate.stats import episode_sums
from gate.stats.change import CollapseState, log_evalues, update
from gate.stats.episode_sums import Sums
from gate.stats.exactness import TokenBins
from gate.stats.gate_stats import CellStats
from gate.stats.ids import ALL, MetricId
from gate.stats.policy import Policy
from gate.stats.registry import Family, Guardrail, Source, tested
from gate.stats.sequences import CountStats, FloatArray, MeanStats, PairedCounts, TwoCounts

# Bump when what a fold stores changes meaning: stored states then refold from scratch.
# 2: pooled and undeclared collapse detectors; 3: sampled-output parity; 4: load bands;
# 5: parity's text statistics on every eligible pair, no mean log-prob scale after partial
# log-probabilities; 6: per-token exactness; 7: pairs left out as not load-matched;
# 8: episode sums; 9: the loop guardrail's baseline side (its answer collapsed against the
# candidate's); 10: greedy mismatch's per-side episode sums, and the collapse detectors
# reading each episode's first pair only; 11: the collapse detectors' warm-up levels from
# each episode's first pair only, as they read; 12: an episode's first pair is its first in
# the whole rollout (an episode begun in an earlier stage opens nothing in this one); 13:
# nor one begun in another arm of the stage (an arm added or killed moves episodes); 14:
# the ratings folded by rating id beside the state (`gate.verdicts.feedback`); 15: the
# collapse detectors' warm-up levels read no dropped pair (a late side moved replay's), nor
# does an arm's acceptance length (`gate_folds.arm_sums`).
FOLD_VERSION = 15
# The bucket of pairs whose segment the policy does not declare ("all" is never declared).
POOLED_ONLY = ALL
Key = tuple[datetime, uuid.UUID]
T = TypeVar("T")

EMPTY_MEAN = MeanStats(0.0, 0.0, 0.0)
EMPTY_PAIRED = PairedCounts(0.0, 0.0, 0.0)
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

    gain: MeanStats = EMPTY_MEAN
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


def folded() -> list[Guardrail]:
    """Return the shadow guardrails the fold keeps in buckets (evaluators and user
    feedback aside: evaluators are kept per name, feedback arrives after the fold)."""
    return [g for g in tested(RolloutMode.SHADOW) if g.source not in _NOT_IN_BUCKETS]


_NOT_IN_BUCKETS = (Source.EVALUATOR, Source.FEEDBACK)


def metrics(g: Guardrail) -> list[MetricId]:
    """Return a folded guardrail's metrics: one per answer statistic for parity, else one."""
    if g.source is Source.PARITY:
        return [MetricId(g.id, stat) for stat in STATISTICS]
    return [MetricId(g.id)]


def zero(family: Family | None) -> CellStats:
    """Return the empty statistics of a family's cell."""
    if family in (Family.PAIRED_DIFFERENCE, Family.EXCEEDANCE):
        return EMPTY_PAIRED
    if family is Family.TWO_RATES:
        return TwoCounts(_COUNT, _COUNT)
    if family is Family.TOKEN_PIT:
        return TokenBins.empty()
    return EMPTY_MEAN
