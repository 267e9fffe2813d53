"""Fold states: adding deltas, the JSON round trip, and GateStats built from them."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np

from gate.stats.change import CollapseState
from gate.stats.fold_json import dump, load_buckets, load_collapse, load_evaluators, load_warmup
from gate.stats.fold_stats import to_stats
from gate.stats.incremental import Bucket, Delta, FoldState, Tail, WarmUp, add, policy_key
from gate.stats.policy import ALL, Policy
from gate.stats.rule import EVAL_PREFIX
from gate.stats.sequences import MeanStats, PairedCounts

POLICY = Policy(segments=["chat", "code"], warmup_pairs=2)
T0 = datetime(2025, 5, 1, tzinfo=UTC)
WARM = WarmUp(Tail({"chat": 1.5}, 2.0), Tail({}, None), {"chat": 0.3, "code": 0.35})


def delta(seconds: int, rates: list[float], *, both_failed: float = 0.0) -> Delta:
    bucket = Bucket(live=3.0, both_failed=both_failed, tpot=MeanStats(3.0, -0.6, 0.2))
    return Delta(
        last=(T0 + timedelta(seconds=seconds), uuid.uuid4()),
        pairs=3,
        warm_pairs=0,
        first_at=T0 + timedelta(seconds=seconds - 60),
        last_at=T0 + timedelta(seconds=seconds),
        buckets={"chat": bucket, ALL: Bucket(live=1.0)},
        evaluators={"task": {"chat": PairedCounts(2.0, 1.0, 0.0)}},
        acceptance={"chat": np.array(rates), "code": np.array([])},
    )


def test_two_deltas_add_up_and_collapse_advances_in_order():
    start = FoldState(policy_key=policy_key(POLICY), pairs=2, warm_pairs=2, warmup=WARM)
    state = add(add(start, delta(100, [0.1, 0.0])), delta(200, [0.05], both_failed=1.0))
    assert state.pairs == 8 and state.watermark is not None
    assert state.buckets["chat"].tpot == MeanStats(6.0, -1.2, 0.4)
    assert state.collapse["chat"].n == 3 and "code" not in state.collapse
    stats = to_stats(state, POLICY)
    assert stats.n_pairs == 8.0 and stats.elapsed_s == 160.0 and stats.warmed_up
    # Both-failed ties count for every evaluator, in the segment and pooled.
    assert stats.cells[(EVAL_PREFIX + "task", "chat")] == PairedCounts(5.0, 2.0, 0.0)
    assert stats.cells[(EVAL_PREFIX + "task", ALL)] == PairedCounts(5.0, 2.0, 0.0)
    assert stats.collapse["code"] == -np.inf and stats.collapse["chat"] > -np.inf


def test_state_parts_survive_a_strict_json_round_trip():
    state = add(FoldState(policy_key="k", warmup=WARM), delta(100, [0.2]))
    state = FoldState(
        policy_key="k", warmup=WARM, buckets=state.buckets, evaluators=state.evaluators,
        collapse={**state.collapse, "code": CollapseState()},
    )  # fmt: skip
    docs = {
        name: json.loads(json.dumps(dump(getattr(state, name)), allow_nan=False))
        for name in ("warmup", "buckets", "evaluators", "collapse")
    }
    assert load_warmup(docs["warmup"]) == WARM
    assert load_buckets(docs["buckets"]) == state.buckets
    assert load_evaluators(docs["evaluators"]) == state.evaluators
    assert load_collapse(docs["collapse"]) == state.collapse
    assert load_warmup(None) is None


def test_the_policy_key_changes_only_with_what_the_fold_depends_on():
    assert policy_key(POLICY) == policy_key(POLICY.model_copy(update={"alpha_kill": 0.01}))
    assert policy_key(POLICY) != policy_key(POLICY.model_copy(update={"warmup_pairs": 3}))
