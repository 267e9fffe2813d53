"""Deterministic, sticky assignment of requests to pairs, control slice and canary cohort."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from gate.rollouts.states import PrimaryTarget, RoutingPlan
from gate.routing.snapshot import Arm

_SCALE = float(2**64)


def unit_hash(rollout_id: int, key: bytes, salt: bytes = b"") -> float:
    """Map (rollout, key) to [0, 1) reproducibly across processes and restarts."""
    digest = hashlib.blake2b(key, digest_size=8, key=f"{rollout_id}".encode() + salt).digest()
    return int.from_bytes(digest, "big") / _SCALE


def sticky_key(raw_body: bytes, episode: str | None) -> bytes:
    """Return what assignment hashes: the request's episode, so every request of an episode
    gets the same cohort (and a shadow episode is mirrored whole); else the body."""
    return raw_body if episode is None else episode.encode()


@dataclass(frozen=True)
class Assignment:
    """What one request gets: a pair (sampled), a control pair, or the canary route."""

    sampled: bool = False
    control: bool = False
    canary: bool = False


NOT_SAMPLED = Assignment()


def assign(
    *, rollout_id: int, plan: RoutingPlan, fraction: float, key: bytes, control_rate: float
) -> Assignment:
    """Assign a request. In canary mode, [0, f) is served by the candidate and [f, 2f)
    is the baseline comparison cohort of the same size; in shadow mode, [0, f) is mirrored.
    """
    if not plan.candidate_traffic or fraction <= 0.0:
        return NOT_SAMPLED
    u = unit_hash(rollout_id, key)
    split = plan.primary is PrimaryTarget.SPLIT
    window = min(1.0, 2 * fraction) if split else fraction
    if u >= window:
        return NOT_SAMPLED
    control = plan.control_slice and unit_hash(rollout_id, key, b"control") < control_rate
    return Assignment(sampled=True, control=control, canary=split and u < fraction)


def choose_arm(rollout_id: int, key: bytes, arms: tuple[Arm, ...]) -> Arm:
    """Return the one arm a sampled request is mirrored to, by weighted rendezvous hashing:
    the arm with the highest score -weight / ln(u), u the arm's hash of the request's
    sticky key (Schindelhauer and Schomaker, "Weighted distributed hash tables", 2005).

    Each active arm gets the share weight / sum of weights (`gate.stats.arms.shares`;
    equal shares at equal weights, where the score orders arms as u does, so the choice is
    the arm with the highest hash), and every request of an episode the same arm. The
    choice depends on the key and the active arms and their weights only, never on an
    arm's own outcomes, and weights change only at a stage boundary
    (`gate.rollouts.arms.reallocate`), so each arm's pairs in a stage are a hash-chosen
    sample of the same traffic (a predictable allocation: each arm's stream is valid on
    its own, as one rollout's). Killing an arm moves only its own episodes to the others;
    adding one takes its share from each; lowering a weight moves only that arm's.
    One arm rather than all: mirroring every arm would multiply the candidate load by
    the number of arms, and the arms' calls on one request would share its prompt and
    the routes' load at that moment, making their streams dependent.
    """

    def score(arm: Arm) -> tuple[float, float]:
        u = unit_hash(rollout_id, key, arm.salt)
        # u as a tie-break keeps the choice at equal weights exactly the highest hash,
        # even where rounding gives two close hashes one score. The ends are the limits
        # (u = 0 scores 0; a hash that rounds to 1.0 scores infinity).
        if u <= 0.0 or u >= 1.0:
            return (0.0 if u <= 0.0 else math.inf, u)
        return (arm.weight / -math.log(u), u)

    return max(arms, key=score)
