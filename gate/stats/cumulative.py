"""Recorded pairs' sufficient statistics at every look at once.

Replay (one recorded rollout) and simulation (thousands of simulated ones) both hold
pairs as `PairColumns` (`gate.stats.columns`) with leading axes (runs, pairs) or (pairs,),
and turn them into one `GateStats` whose arrays have a trailing looks axis, with cumulative
sums taken once: each guardrail's cells come from `gate.stats.guardrail_cells` (sampled
parity: `gate.stats.parity_cells`), the load bands from `gate.stats.load_bands`, and the
acceptance-collapse detectors from here. Production folds the same statistics
incrementally: SQL aggregates of each new slice of pairs (`gate.verdicts.aggregates`)
added into a stored state (`gate.stats.incremental`).

Warm-up: the first `policy.warmup_pairs` pairs, in the order given (fold order for
recorded pairs, see `gate.stats.replay`), are excluded from every test. They fix
the tail thresholds (the baseline's warm-up quantile of TTFT and e2e, pooled) and each
segment's acceptance-collapse level (`collapse_ratio` times its warm-up mean). With
episodes the collapse detectors read each episode's first pair only (`gate.stats.change`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from gate.db.enums import RolloutMode
from gate.stats.change import log_evalues
from gate.stats.columns import BASE, CAND, Acc, Context, PairColumns, load_matched
from gate.stats.exactness_cells import exactness_control
from gate.stats.gate_stats import CellStats, GateStats
from gate.stats.guardrail_cells import BUILDERS
from gate.stats.ids import ALL, UNDECLARED, Cell
from gate.stats.load_bands import bands
from gate.stats.parity_cells import parity_control
from gate.stats.policy import Policy
from gate.stats.registry import collapse_segments, tested
from gate.stats.sequences import BoolArray, FloatArray, IntArray


def looks_every(n_pairs: int, every: int) -> IntArray:
    """Return look positions (pair counts) every `every` pairs, plus the last pair."""
    looks = np.arange(every, n_pairs + 1, every, dtype=np.int64)
    if looks.size == 0 or looks[-1] != n_pairs:
        looks = np.append(looks, n_pairs)
    return looks


def to_stats(
    cols: PairColumns,
    policy: Policy,
    looks: IntArray,
    *,
    mode: RolloutMode = RolloutMode.SHADOW,
    candidate_share: float = 0.5,
    next_share: float | None = 1.0,
    load_match: float | None = None,
) -> GateStats:
    """Return the gate's sufficient statistics after each look (pair counts `looks`).

    `next_share` is the candidate's traffic share once promoted (`next_stage_share`; None:
    no hold for this step): the load bands' hold compares the load it will bring with the
    loads where the gain is proven. `load_match` (`policy.load_tolerance`; None: every
    pair) leaves out of the tests the pairs whose routes' loads are further apart or
    unknown; they are counted (`n_unmatched`).
    """
    n_total = cols.segment.shape[-1]
    index = np.arange(n_total)
    warm = index < policy.warmup_pairs
    judged = ~warm & ~cols.dropped & ~cols.is_control
    matched = load_matched(cols, load_match)
    live = judged & matched
    acc = Acc(cols.segment, len(policy.segments), looks, cols.episode)
    cells: dict[tuple[str, str], CellStats] = {}
    seg_index = {name: i for i, name in enumerate(policy.segments)}
    ctx = Context(cols, policy, warm, live, candidate_share, mode is RolloutMode.CANARY)
    for g in tested(mode):
        build = BUILDERS[(g.source, g.family(mode))]
        for metric, builder in build(ctx, g).items():
            for name in g.segments(policy):
                cells[Cell(metric, name)] = builder(acc, seg_index.get(name))
    control = parity_control(ctx, acc) if mode is RolloutMode.SHADOW else {}
    control = {**control, **exactness_control(ctx, acc)}
    counted = acc(live, None)
    cohorts = None
    if mode is RolloutMode.CANARY:
        served = ctx.served
        if acc.episodes is not None:
            # The cohort is drawn per episode: the imbalance check's independent draws are
            # the episodes (each counted in the cohort of its first served request).
            first = acc.episodes.before(np.asarray(served.any(axis=-1), dtype=np.float64)) == 0
            served = served & first[..., None]
        cohorts = (acc(served[..., BASE], None), acc(served[..., CAND], None))
    return GateStats(
        cells=cells,
        n_pairs=counted,
        n_dropped=acc((~warm & cols.dropped), None),
        n_unmatched=acc(judged & ~matched, None),
        elapsed_s=_elapsed(cols.created_s, looks),
        warmed_up=np.broadcast_to(looks > policy.warmup_pairs, counted.shape),
        collapse=_collapse(cols, policy, warm, live, looks, _opens_episode(acc, cols)),
        cohort_counts=cohorts,
        candidate_share=candidate_share,
        bands=bands(ctx, acc, mode, next_share),
        control=control,
        n_episodes=_episodes(acc, live),
    )  # fmt: skip


def _episodes(acc: Acc, live: BoolArray) -> FloatArray | None:
    """Return the episodes among the live pairs at each look (None: no episode column)."""
    if acc.episodes is None:
        return None
    counted = live.astype(np.float64)
    return acc(counted * (acc.episodes.before(counted) == 0), None)


def _opens_episode(acc: Acc, cols: PairColumns) -> BoolArray:
    """Return which pairs are the first of their episode in the whole rollout (all of them
    without episodes): the first here of an episode no earlier stage holds a pair of.

    The collapse detectors read only these (`gate.stats.change`): a conversation's later
    turns are not independent of its first, episodes are of one another.
    """
    first = (
        np.ones((), dtype=bool)
        if acc.episodes is None
        else acc.episodes.before(np.ones(acc.episodes.order.shape)) == 0
    )
    return np.asarray(first if cols.continues is None else first & ~cols.continues)


def _elapsed(created_s: FloatArray, looks: IntArray) -> FloatArray:
    # Earliest to latest pair so far: fold order need not be creation order.
    latest = np.maximum.accumulate(created_s, axis=-1)[..., looks - 1]
    earliest = np.minimum.accumulate(created_s, axis=-1)[..., looks - 1]
    return np.asarray(latest - earliest, dtype=np.float64)


def _collapse(
    cols: PairColumns,
    policy: Policy,
    warm: BoolArray,
    live: BoolArray,
    looks: IntArray,
    opens: BoolArray,
) -> dict[str, FloatArray]:
    g = policy.guardrails.acceptance
    if not g.enabled:
        return {}
    rate = np.nan_to_num(cols.acceptance)
    # With episodes the detectors read, and their levels are fixed from, each episode's
    # first pair only (`gate.stats.change`): a first turn's level may differ from a later one's.
    has = np.isfinite(cols.acceptance) & opens
    # The level from the warm-up's judgeable pairs, as the fold's (`gate.verdicts.warmup`):
    # a dropped pair's candidate may land after the fold fixed it (a span from the spool).
    warm = warm & ~cols.dropped
    pooled = _warm_mean(rate, warm & has, None)
    out = {}
    for name in collapse_segments(policy):
        member = _members(cols.segment, policy, name)
        level = _warm_mean(rate, warm & has & member, pooled)
        use = live & has & member
        log_e = np.where(use, log_evalues(rate, g.collapse_ratio * level), 0.0)
        cum = np.cumsum(log_e, axis=-1)
        # Masked Shiryaev-Roberts: non-members neither add a term nor multiply.
        starts = np.where(use, -(cum - log_e), -np.inf)
        log_sr = cum + np.logaddexp.accumulate(starts, axis=-1)
        out[name] = np.maximum.accumulate(log_sr, axis=-1)[..., looks - 1]
    return out


def _members(segment: IntArray, policy: Policy, name: str) -> BoolArray:
    """Return the pairs a collapse detector reads (pooled: all; undeclared: the others)."""
    if name == ALL:
        return np.ones(segment.shape, dtype=bool)
    if name == UNDECLARED:
        return np.asarray((segment < 0) | (segment >= len(policy.segments)))
    return np.asarray(segment == policy.segments.index(name))


def _warm_mean(rate: FloatArray, mask: BoolArray, fallback: FloatArray | None) -> FloatArray:
    count = mask.sum(axis=-1, keepdims=True)
    mean = np.where(mask, rate, 0.0).sum(axis=-1, keepdims=True) / np.maximum(count, 1)
    if fallback is None:
        return np.asarray(mean, dtype=np.float64)
    return np.asarray(np.where(count > 0, mean, fallback), dtype=np.float64)


def at_look(stats: GateStats, i: int) -> GateStats:
    """Return the statistics of look `i` alone (the last axis indexed away)."""
    return _index(stats, i)  # type: ignore[no-any-return]


def _index(value: Any, i: int) -> Any:
    if isinstance(value, np.ndarray):
        return value[..., i] if value.ndim else value
    if isinstance(value, dict):
        return {k: _index(v, i) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_index(v, i) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _index(getattr(value, f.name), i) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    return value
