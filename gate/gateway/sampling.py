"""Deterministic, sticky assignment of requests to pairs, control slice and canary cohort."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gate.rollouts.states import PrimaryTarget, RoutingPlan

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
