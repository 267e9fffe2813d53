"""Evaluator registry: names to factories, configured by a rollout's policy.

A policy names its evaluators under `evaluators`, as a list of names or of
`{"name": ..., "options": {...}}` entries, or as a mapping name -> options. Without the
key every built-in evaluator runs with its defaults. The key is part of the gate policy
(`gate.stats.policy.Policy.evaluators` checks its shape); `rollout create` and policy
updates also build the set once, so an unknown name or a bad option is a 422 then, not a
worker error later.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from evaluators.base import Evaluator, PairEvaluator
from evaluators.groundedness import GroundednessEvaluator
from evaluators.parity import GreedyParityEvaluator
from evaluators.schema import SchemaEvaluator
from evaluators.task import TaskEvaluator
from gate.errors import ConfigError

SideFactory = Callable[[Mapping[str, Any]], Evaluator]
PairFactory = Callable[[Mapping[str, Any]], PairEvaluator]

SIDE_EVALUATORS: dict[str, SideFactory] = {
    "groundedness": GroundednessEvaluator.from_options,
    "schema": SchemaEvaluator.from_options,
    "task": TaskEvaluator.from_options,
}
PAIR_EVALUATORS: dict[str, PairFactory] = {
    "greedy_parity": GreedyParityEvaluator.from_options,
}


@dataclass(frozen=True)
class EvaluatorSet:
    """The evaluators one rollout runs: per side, and per pair."""

    side: tuple[Evaluator, ...]
    pair: tuple[PairEvaluator, ...]


def policy_entries(policy: Mapping[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """Return (name, options) for each evaluator the policy names, in order."""
    declared = (policy or {}).get("evaluators")
    if declared is None:
        return [(name, {}) for name in (*SIDE_EVALUATORS, *PAIR_EVALUATORS)]
    if isinstance(declared, Mapping):
        return [(str(name), dict(opts or {})) for name, opts in declared.items()]
    if not isinstance(declared, list):
        raise ConfigError("policy 'evaluators' must be a list or a mapping")
    entries: list[tuple[str, dict[str, Any]]] = []
    for item in declared:
        if isinstance(item, str):
            entries.append((item, {}))
        elif isinstance(item, Mapping) and isinstance(item.get("name"), str):
            entries.append((item["name"], dict(item.get("options") or {})))
        else:
            raise ConfigError(f"bad evaluator entry in policy: {item!r}")
    return entries


def build_evaluators(policy: Mapping[str, Any] | None) -> EvaluatorSet:
    """Build the evaluators a policy configures; unknown names or options are errors."""
    # Cached on the entries' JSON: workers build each rollout's set once, not per task.
    return _build(json.dumps(_with_sandbox(policy, policy_entries(policy)), sort_keys=True))


def _with_sandbox(
    policy: Mapping[str, Any] | None, entries: list[tuple[str, dict[str, Any]]]
) -> list[tuple[str, dict[str, Any]]]:
    # The policy's top-level `sandbox` reaches the task evaluator unless its options say.
    mode = (policy or {}).get("sandbox")
    if mode is None:
        return entries
    return [(n, {"sandbox": mode, **o} if n == "task" else o) for n, o in entries]


@lru_cache(maxsize=64)
def _build(entries_json: str) -> EvaluatorSet:
    side: list[Evaluator] = []
    pair: list[PairEvaluator] = []
    for name, options in json.loads(entries_json):
        try:
            if name in SIDE_EVALUATORS:
                side.append(SIDE_EVALUATORS[name](options))
            elif name in PAIR_EVALUATORS:
                pair.append(PAIR_EVALUATORS[name](options))
            else:
                known = sorted({*SIDE_EVALUATORS, *PAIR_EVALUATORS})
                raise ConfigError(f"unknown evaluator {name!r}; known: {', '.join(known)}")
        except TypeError as exc:
            raise ConfigError(f"bad options for evaluator {name!r}: {exc}") from None
    return EvaluatorSet(tuple(side), tuple(pair))


def code_sandbox(policy: Mapping[str, Any] | None) -> str | None:
    """Return how the policy's task evaluator contains code (`bwrap`, `unsafe-local`)."""
    try:
        entries = _with_sandbox(policy, policy_entries(policy))
    except ConfigError:
        return None
    modes = [str(options.get("sandbox", "bwrap")) for name, options in entries if name == "task"]
    return modes[0] if modes else None
