"""Several candidate configurations (arms) in one rollout: per-arm gates and the best arm.

Each arm's pairs (its candidate against the same baseline) are one stream, judged by the
gate's own rule (`rule.apply_rule`) on the arm's pairs alone; an arm is killed on its own
(its first kill verdict) and stops counting. Among the live arms, the best one is chosen
on the primary latency metric, the mean clipped paired log-ratio to the baseline.

Error budgets (`Policy.arms`):

* Guardrails: each arm's tests spend `alpha_kill / slots` and `alpha_promote / slots`
  (`arm_policy`). `slots` is fixed in advance, as the evaluators' are, so an arm added
  mid-run finds its share waiting; by the union bound the chance that any harmless arm is
  killed, or that any arm missing a promotion criterion is promoted, stays within the
  policy's alphas for up to `slots` arms.
* The choice: one confidence sequence per arm on its mean log-ratio
  (`sequences.mean_interval`, both bounds at `alpha_choice / (2 slots)`). All of them
  cover at every look at once with probability at least 1 - alpha_choice (union bound
  over arms; each is time-uniform in the arm's own pair count). On that event, every
  comparison made below is true at every look, whenever it is made and however many
  looks there are. Arms are compared through their intervals: `i` beats `j` when
  `upper_i < lower_j`, and `i` ties `j` when the whole difference interval
  `[lower_i - upper_j, upper_i - lower_j]` lies within +/- log(1 + tie_margin). So a strict
  preference between two equal arms, or a choice of an arm more than the margin slower
  than another live arm, has probability at most alpha_choice under continuous
  monitoring. Per-arm sequences rather than sequences on pairwise differences cost width
  (the radii add instead of adding in quadrature) but need nothing about how traffic is
  split between arms: an arm that starts later, or a share moved toward the leaders at
  any time by a rule that reads only pairs already seen (a predictable allocation),
  leaves each arm's pairs i.i.d. and each sequence valid (`bench/arms_sim.py`, the
  `-adaptive` cases, simulates it). Two caveats, as for the primary gain: the mean
  sequence is asymptotic (unbounded below `MIN_N` pairs), and the choice's budget is per
  stage, like `alpha_promote`.

Reallocation (`arms.reallocate`, off by default): at a stage boundary, an arm the stage's
last look proved behind another live arm (`stage_weights`) gets a smaller weight for the
next stage, and the gateway's weighted rendezvous hashing gives each arm its weight's
share (`shares`). The weights read only looks already taken and change only where a new
stage's sequences start afresh, so within a stage each arm's pairs are still a fixed,
hash-chosen share of the traffic and every bound above holds as with equal shares.

An arm is best (or tied best) when, against every other live arm, it beats it or ties it.
The rollout promotes when a best-or-tied arm's own gate promotes; among several, the one
with the lowest estimate wins. It is killed when every arm is killed (an arm that has no
pair yet is still to come), and held when every live arm's gate holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from gate.stats.policy import Policy, log_ratio
from gate.stats.record_columns import Record, continues_of, episode_of
from gate.stats.rule import Code
from gate.stats.sequences import BoolArray, FloatArray, IntArray, MeanStats, mean_interval


class ArmState(IntEnum):
    """An arm's state at a look, as integers for arrays."""

    WAITING = 0  # no pair yet (an arm added later)
    RUNNING = 1
    KILLED = 2
    BEST = 3  # proven best: it beats every other live arm
    TIED = 4  # best within the tie margin, level with at least one other live arm
    PROMOTED = 5  # the winner at this look


@dataclass(frozen=True)
class ArmStream:
    """One arm at every look: its pairs so far, its gate's code, its pooled primary statistics.

    Before the arm's first pair, `pairs` and `primary.n` are 0 and `code` is CONTINUE.
    """

    pairs: IntArray
    code: IntArray
    primary: MeanStats


@dataclass(frozen=True)
class ArmLooks:
    """The multi-arm rule at every look; arrays have the arms first, then the looks."""

    code: IntArray
    winner: IntArray  # the promoted arm's index at a look, -1 none
    leader: IntArray  # the live arm with the lowest estimate, -1 none
    state: IntArray  # ArmState per arm and look
    estimate: FloatArray  # mean log-ratio per arm and look
    lower: FloatArray
    upper: FloatArray


def member(pair_arm: str | None, arm: str) -> bool:
    """Return whether a pair naming `pair_arm` is in `arm`'s stream: the arm's own pairs and
    the pairs that name no arm (the control pairs, the baseline against itself, which count
    in every arm's). The fold's SQL says the same (`gate.verdicts.slices`)."""
    return pair_arm is None or pair_arm == arm


def arm_rows(records: Sequence[Record], arm: str) -> list[Record]:
    """Return `arm`'s stream of the fold-ordered `records` (`member`), each pair whose
    episode has an earlier pair in any arm marked `episode_continues`: an episode moves
    between arms when the arm set changes (`gate.gateway.sampling.choose_arm`), and its
    turns in the new arm are no first turns (as the fold's `opens` decides)."""
    seen: set[str] = set()
    out = []
    for record in records:
        episode = episode_of(record)
        if member(record.get("arm"), arm):
            moved = episode is not None and episode in seen and not continues_of(record)
            out.append({**record, "episode_continues": True} if moved else record)
        if episode is not None:
            seen.add(episode)
    return out


def arm_policy(policy: Policy) -> Policy:
    """Return `policy` with the alphas each arm's own gate spends (a `slots` share)."""
    slots = policy.arms.slots
    return policy.model_copy(
        update={
            "alpha_kill": policy.alpha_kill / slots,
            "alpha_promote": policy.alpha_promote / slots,
        }
    )


def arm_intervals(policy: Policy, streams: Sequence[ArmStream]) -> tuple[FloatArray, ...]:
    """Return (estimate, lower, upper) of each arm's mean log-ratio, arms stacked first.

    Args:
        policy: its `arms.alpha_choice` and `arms.slots` set each bound's alpha.
        streams: the arms' statistics per look.

    Returns:
        Three arrays; unbounded below `sequences.MIN_N` pairs, NaN estimate at none.
    """
    alpha = policy.arms.alpha_choice / (2 * policy.arms.slots)
    got = [
        mean_interval(s.primary, alpha_lower=alpha, alpha_upper=alpha, n_opt=policy.n_opt("all"))
        for s in streams
    ]
    return tuple(np.stack([np.asarray(getattr(g, k)) for g in got]) for k in _ENDS)


_ENDS = ("estimate", "lower", "upper")


def choose(policy: Policy, streams: Sequence[ArmStream]) -> ArmLooks:
    """Apply the multi-arm rule to every look (and run) of the arms' streams at once.

    Args:
        policy: the rollout's policy (`arms` section).
        streams: per arm, its gate codes and primary statistics; broadcast together.

    Returns:
        The rollout's code, winner, leader and each arm's state and interval per look.
    """
    if len(streams) > policy.arms.slots:
        raise ValueError(f"{len(streams)} arms, but the policy budgets arms.slots = "
                         f"{policy.arms.slots}")  # fmt: skip
    code = np.stack([np.asarray(s.code, dtype=np.int64) for s in streams])
    estimate, lower, upper = arm_intervals(policy, streams)
    code, estimate, lower, upper = np.broadcast_arrays(code, estimate, lower, upper)
    started = np.broadcast_to(np.stack([np.asarray(s.pairs) > 0 for s in streams]), code.shape)
    killed = np.maximum.accumulate(code == Code.KILL, axis=-1)
    live = started & ~killed
    settled, tied = _settled(policy, live, lower, upper)
    promotable = settled & (code == Code.PROMOTE)
    winner = _lowest(promotable, estimate)
    leader = _lowest(live & np.isfinite(estimate), estimate)
    rollout = np.select(
        [
            winner >= 0,
            killed.all(axis=0),
            live.any(axis=0) & np.all(~live | (code == Code.HOLD), axis=0),
        ],
        [Code.PROMOTE, Code.KILL, Code.HOLD],
        default=Code.CONTINUE,
    ).astype(np.int64)
    state = np.select(
        [killed, ~started, _is(winner, code.shape), settled & ~tied, settled],
        [ArmState.KILLED, ArmState.WAITING, ArmState.PROMOTED, ArmState.BEST, ArmState.TIED],
        default=ArmState.RUNNING,
    ).astype(np.int64)
    return ArmLooks(rollout, winner, leader, state, estimate, lower, upper)


def _settled(
    policy: Policy, live: BoolArray, lower: FloatArray, upper: FloatArray
) -> tuple[BoolArray, BoolArray]:
    """Return (best or tied best, tied with some live arm) per arm and look."""
    m = log_ratio(policy.arms.tie_margin)
    settled = live.copy()
    tied = np.zeros_like(live)
    for i in range(live.shape[0]):
        for j in range(live.shape[0]):
            if i == j:
                continue
            beats = upper[i] < lower[j]
            level = (lower[i] - upper[j] > -m) & (upper[i] - lower[j] < m)
            settled[i] &= ~live[j] | beats | level
            tied[i] |= live[j] & level & ~beats
    return settled, tied


def _lowest(mask: BoolArray, estimate: FloatArray) -> IntArray:
    """Return, per look, the index of the masked arm with the lowest estimate (-1 none)."""
    masked = np.where(mask, np.nan_to_num(estimate, nan=np.inf), np.inf)
    best = np.argmin(masked, axis=0)
    return np.where(mask.any(axis=0), best, -1).astype(np.int64)


def _is(index: IntArray, shape: tuple[int, ...]) -> BoolArray:
    """Return a mask of `shape` (arms first) true where the arm is `index` at that look."""
    arms = np.arange(shape[0]).reshape((-1,) + (1,) * (len(shape) - 1))
    return np.asarray(arms == index[None, ...])


def ahead_of(intervals: Mapping[str, tuple[float | None, float | None]]) -> dict[str, list[str]]:
    """Return, for each live arm, the arms proven faster than it (their upper bound below
    its lower bound, the relation `choose` calls beating), sorted; empty for the best,
    the tied best and the leader.

    Args:
        intervals: each live arm's primary-ratio interval at the stage's last look; None
            for an end that is unbounded (too few pairs).
    """
    return {
        name: sorted(o for o, other in intervals.items() if o != name and beats(other, mine))
        for name, mine in intervals.items()
    }


def stage_weights(ahead: Mapping[str, list[str]], *, behind_weight: float) -> dict[str, float]:
    """Return each live arm's weight for the next stage: `behind_weight` (`Arms.
    behind_weight`) for an arm another is proven ahead of (`ahead_of`), else 1."""
    return {name: behind_weight if by else 1.0 for name, by in ahead.items()}


def beats(i: tuple[float | None, float | None], j: tuple[float | None, float | None]) -> bool:
    """Return whether an arm with interval `i` is proven faster than one with `j` (None:
    an unbounded end)."""
    return i[1] is not None and j[0] is not None and i[1] < j[0]


def shares(weights: Mapping[str, float]) -> dict[str, float]:
    """Return each active arm's share of the sampled episodes under weighted rendezvous
    hashing (`gate.gateway.sampling.choose_arm`): its weight over the weights' sum."""
    total = sum(weights.values())
    return {name: weight / total for name, weight in weights.items()}
