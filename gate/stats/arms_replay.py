"""Backtest pairs of several arms: each arm's pairs through its own gate, then `arms.choose`.

A pair record names its arm with the optional string field `arm` (the candidate
configuration whose call the pair compared with the baseline; `gate.stats.replay`
documents the rest of the schema). A file where no record names one is the single-arm
case (`replay.replay`); in a file where some do, every record must, but a control pair
(the baseline against itself, which the gateway mirrors to no arm and the export writes
with a null arm) is in every arm's stream, as `gate.verdicts.arms` judges it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from gate.db.enums import Decision, RolloutMode
from gate.errors import BadRequest, InputMalformed
from gate.stats.acceptance_length import AcceptanceLength, summarise
from gate.stats.arms import ArmLooks, ArmState, ArmStream, arm_policy, arm_rows, choose, member
from gate.stats.cumulative import at_look, looks_every, to_stats
from gate.stats.gate_stats import GateStats
from gate.stats.ids import ALL
from gate.stats.policy import Policy, at_stage, next_stage_share
from gate.stats.record_columns import Record, columns, dropped_of, fold_order
from gate.stats.replay import look_fields
from gate.stats.rule import Code, apply_rule
from gate.stats.sequences import IntArray, MeanStats
from gate.stats.verdict import DECISIONS, VerdictResult, decide


@dataclass(frozen=True)
class ArmResult:
    """One arm at the replay's decisive look (a killed arm: at its kill)."""

    name: str
    state: ArmState
    decision: Decision
    pairs: int
    ratio: float | None  # geometric-mean primary ratio to the baseline
    lower: float
    upper: float
    verdict: VerdictResult | None
    acceptance: AcceptanceLength  # over the arm's pairs up to that look


@dataclass(frozen=True)
class ArmsReplayResult:
    """The first decisive look of a multi-arm replay (or the last look, if none was)."""

    decision: Decision
    pairs: int
    decisive: bool
    looks: int
    total_pairs: int
    winner: str | None
    leader: str | None
    arms: tuple[ArmResult, ...]


def arm_of(record: Record) -> str | None:
    """Return the arm a pair record names (None: the single-arm case)."""
    arm = record.get("arm")
    if arm is not None and (not isinstance(arm, str) or not arm):
        raise InputMalformed(f"arm is not a non-empty string or null: {arm!r}")
    return arm


def has_arms(records: Iterable[Record]) -> bool:
    """Return whether any record names an arm."""
    return any(arm_of(r) is not None for r in records)


@dataclass(frozen=True)
class _Arm:
    name: str
    rows: list[Record]
    stats: GateStats
    looks: IntArray  # the arm's own looks (its pair counts)
    index: IntArray  # per global look: the arm's own look index (-1: not started)


def replay_arms(
    pairs: Iterable[Record],
    policy: Policy,
    *,
    every: int = 100,
    stage: int = 0,
    load_match: float | None = None,
) -> ArmsReplayResult:
    """Replay several arms' pairs (shadow mode), looking every `every` pairs of all arms."""
    next_share = next_stage_share(policy, stage, RolloutMode.SHADOW)
    policy = at_stage(policy, stage)
    records = fold_order(list(pairs))
    if not records:
        raise BadRequest("no pairs to replay")
    looks = looks_every(len(records), every)
    judged = arm_policy(policy)
    arms: list[_Arm] = []
    streams: list[ArmStream] = []
    for name, (positions, candidates) in _split(records).items():
        rows = arm_rows(records, name)  # its `positions`, episodes begun elsewhere marked
        counts = np.searchsorted(np.asarray(positions), looks, side="right")
        own = np.unique(counts[counts > 0])
        stats = to_stats(columns(rows, judged, RolloutMode.SHADOW), judged, own,
                         next_share=next_share, load_match=load_match)  # fmt: skip
        index = np.where(counts > 0, np.searchsorted(own, counts), -1)
        arms.append(_Arm(name, rows, stats, own, index))
        started = np.searchsorted(np.asarray(candidates), looks, side="right")
        streams.append(_stream(judged, stats, started, index))
    got = choose(policy, streams)
    decisive = np.flatnonzero(got.code != Code.CONTINUE)
    at = int(decisive[0]) if decisive.size else looks.size - 1
    return ArmsReplayResult(
        decision=DECISIONS[Code(int(got.code[at]))],
        pairs=int(looks[at]),
        decisive=bool(decisive.size),
        looks=at + 1,
        total_pairs=len(records),
        winner=_name(arms, int(got.winner[at])),
        leader=_name(arms, int(got.leader[at])),
        arms=tuple(_result(judged, arm, got, k, at) for k, arm in enumerate(arms)),
    )


def _split(records: list[Record]) -> dict[str, tuple[list[int], list[int]]]:
    """Return each arm's record positions (the control pairs in every arm's) and those of
    its own candidate pairs, arms in order of their first pair."""
    named = [arm_of(r) for r in records]
    own: dict[str, list[int]] = {}
    for n, (record, arm) in enumerate(zip(records, named, strict=True)):
        if arm is not None:
            own.setdefault(arm, []).append(n)
        elif not record.get("is_control"):
            raise InputMalformed(f"pair {n + 1}: names no arm, while other pairs do")
    return {
        arm: ([n for n, a in enumerate(named) if member(a, arm)], mine) for arm, mine in own.items()
    }


def _stream(policy: Policy, stats: GateStats, counts: IntArray, index: IntArray) -> ArmStream:
    """Return an arm's codes and primary statistics at the global looks."""
    started, at = index >= 0, np.maximum(index, 0)
    code = np.where(started, apply_rule(policy, stats).code[at], Code.CONTINUE)
    cell = stats.cells.get((policy.primary.metric, ALL))
    if not isinstance(cell, MeanStats):
        return ArmStream(counts, code, MeanStats(np.zeros(index.shape), 0.0, 0.0))
    values = {f.name: np.where(started, np.asarray(getattr(cell, f.name))[at], 0.0)
              for f in fields(cell)}  # fmt: skip
    return ArmStream(counts, code, type(cell)(**values))


def _name(arms: list[_Arm], index: int) -> str | None:
    return arms[index].name if index >= 0 else None


def _result(policy: Policy, arm: _Arm, got: ArmLooks, k: int, at: int) -> ArmResult:
    """Return arm `k` at global look `at` (a killed arm as at its kill, with its reason)."""
    state = ArmState(int(got.state[k, at]))
    if state is ArmState.KILLED:
        at = int(np.argmax(got.state[k] == ArmState.KILLED))
    own = int(arm.index[at])
    verdict = None if own < 0 else decide(policy, at_look(arm.stats, own))
    estimate = float(got.estimate[k, at])
    pairs = 0 if own < 0 else int(arm.looks[own])
    return ArmResult(
        name=arm.name,
        state=state,
        decision=Decision.CONTINUE if verdict is None else verdict.decision,
        pairs=pairs,
        ratio=float(np.exp(estimate)) if np.isfinite(estimate) else None,
        lower=float(np.exp(got.lower[k, at])),
        upper=float(np.exp(got.upper[k, at])),
        verdict=verdict,
        acceptance=acceptance_of(arm.rows[:pairs]),
    )


_COUNTS = (
    ("candidate", "output_tokens"),
    ("candidate", "accepted_tokens"),
    ("candidate", "draft_tokens"),
    ("candidate", "distinct_2"),
    ("baseline", "distinct_2"),
)


def acceptance_of(records: list[Record]) -> AcceptanceLength:
    """Return the acceptance length of the records' candidate calls (control pairs and
    pairs dropped at their deadline aside, as the fold: `gate.verdicts.acceptance`)."""
    rows = [
        [_number((r.get(side) or {}).get(key)) for side, key in _COUNTS]
        for r in records
        if not r.get("is_control") and not dropped_of(r)
    ]
    values = np.asarray(rows, dtype=np.float64).reshape(len(rows), len(_COUNTS)).T
    return summarise(*values)


def _number(value: object) -> float:
    return (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) else np.nan
    )


def shown_arm(winner: str | None, leader: str | None, judged: Iterable[str]) -> str | None:
    """Return the arm whose own verdict (its cells and load bands) the rollout's verdict on
    a choice shows: the winner, else the leader, else the first arm judged (one with a
    verdict: a killed arm leads nothing, yet its verdict is shown). The one rule both
    `gate.verdicts.arms.rollout_verdict` and the crossover's reading of a stored choice
    (`gate.routing.crossover`) apply."""
    return winner or leader or next(iter(judged), None)


def shown_in(choice: dict[str, Any] | None) -> str | None:
    """Return `shown_arm` of a choice stored as `to_json` writes it (None: no choice)."""
    if not choice:
        return None
    arms = choice.get("arms")
    judged = [a["arm"] for a in arms if isinstance(a, dict) and a.get("summary") is not None] \
        if isinstance(arms, list) else []  # fmt: skip
    return shown_arm(choice.get("winner"), choice.get("leader"), judged)


def to_json(result: ArmsReplayResult) -> dict[str, Any]:
    """Return a multi-arm replay as JSON: the choice, then each arm with its own verdict."""
    return {
        **look_fields(result),
        "winner": result.winner,
        "leader": result.leader,
        "arms": [
            {
                "arm": arm.name,
                "state": arm.state.name.lower(),
                "decision": arm.decision.value,
                "pairs": arm.pairs,
                "ratio": arm.ratio,
                "interval": [_finite(arm.lower), _finite(arm.upper)],
                "reason_codes": list(arm.verdict.reason_codes) if arm.verdict else [],
                "summary": arm.verdict.summary if arm.verdict else None,
                # Tokens per verify step (comparable across draft lengths), and the pairs
                # with the repetition-loop signature among those where it can be read.
                "acceptance_length": arm.acceptance.length,
                "loop_pairs": arm.acceptance.looping,
                "loop_compared": arm.acceptance.compared,
            }
            for arm in result.arms
        ],
    }


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None
