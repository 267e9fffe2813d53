"""Folding pairs in batches between gate runs equals replaying them all from scratch.

Data: 900 simulated pairs (tests/gate/stats/test_sql.py: control, dropped, failed and
greedy pairs, an undeclared segment, evaluations landing up to a minute after creation,
so fold order differs from creation order) stored in five batches, the gate run after
each. After every run the folded statistics and the verdict equal those of
`gate.stats.replay` over all `pair_records` so far (feedback aside: it is not folded).
"""

from __future__ import annotations

import threading
from dataclasses import asdict

import numpy as np
import pytest
from sqlalchemy import select

from evaluators.service import evaluate_pair
from gate.db.enums import Cohort, Decision, GenerationStatus, RolloutMode
from gate.db.models import GateFold, Pair
from gate.pairs.export import pair_records
from gate.pairs.service import complete_ready
from gate.pairs.watermark import stamp_evaluated
from gate.stats.cumulative import at_look, to_stats
from gate.stats.fold_stats import to_stats as folded_stats
from gate.stats.gate_stats import GateStats
from gate.stats.policy import Policy, load_policy
from gate.stats.record_columns import columns, fold_order
from gate.stats.replay import replay
from gate.stats.rule import FEEDBACK
from gate.stats.simulated_pairs import Scenario
from gate.stats.verdict import VerdictResult
from gate.verdicts.folds import fold
from gate.verdicts.service import compute
from tests import factories
from tests.evaluators.factories import RIGHT, make_pair, make_rollout
from tests.gate.stats.test_sql import as_floats, recorded_pairs, store

pytestmark = pytest.mark.postgres
DEFAULTS = Policy()
# Decides within 900 pairs: short warm-up, no minimum duration.
QUICK = Policy(warmup_pairs=100, min_pairs=300, min_duration_s=0)
# Can promote within 900 pairs: one segment, wider rate margins, no greedy guardrail.
PROMPT = load_policy(
    {
        "segments": ["chat"],
        "warmup_pairs": 100,
        "min_pairs": 300,
        "min_duration_s": 0,
        "guardrails": {
            "failures": {"margin": 0.05},
            "ttft_tail": {"margin": 0.05},
            "greedy_mismatch": {"enabled": False},
        },
    }
)
# Batch sizes: the warm-up (200 or 100 pairs) ends inside a batch, one batch is one pair.
SIZES = (150, 110, 1, 339, 300)


def batches(records: list[dict]) -> list[list[dict]]:
    """Split records (in stamp order) near SIZES, never between two equal stamps."""
    out, start = [], 0
    for size in SIZES:
        end = min(start + size, len(records))
        while (
            0 < end < len(records)
            and records[end]["evaluated_at"] == records[end - 1]["evaluated_at"]
        ):
            end += 1
        out.append(records[start:end])
        start = end
    return [b for b in out if b]


def replayed(session, rollout_id: int, policy: Policy) -> tuple[GateStats, VerdictResult]:
    records = list(pair_records(session, rollout_id=rollout_id, stage=0, evaluated_only=True))
    cols = columns(fold_order(records), policy, RolloutMode.SHADOW)
    stats = at_look(to_stats(cols, policy, np.array([len(records)])), 0)
    return stats, replay(records, policy, every=len(records)).verdict


def assert_same_stats(got: GateStats, want: GateStats) -> None:
    assert float(got.n_pairs) == float(want.n_pairs)
    assert float(got.n_dropped) == float(want.n_dropped)
    assert float(got.elapsed_s) == pytest.approx(float(want.elapsed_s))
    assert bool(got.warmed_up) is bool(want.warmed_up)
    expected = {k: v for k, v in want.cells.items() if k[0] != FEEDBACK}
    assert set(got.cells) == set(expected)
    for key, cell in expected.items():
        assert as_floats(got.cells[key]) == pytest.approx(as_floats(cell), rel=1e-9, abs=1e-9), key
    assert got.collapse == pytest.approx({k: float(v) for k, v in want.collapse.items()})


def assert_same_verdict(got: VerdictResult, want: VerdictResult) -> None:
    assert (got.decision, got.reason_codes, got.n_pairs) == (
        want.decision,
        want.reason_codes,
        want.n_pairs,
    )
    cells = [asdict(c) for c in want.cells]  # the live gate reads ratings too
    assert len(got.cells) == len(cells)
    for mine, theirs in zip((asdict(c) for c in got.cells), cells, strict=True):
        numbers = {k for k, v in theirs.items() if isinstance(v, float)}
        assert {k: mine[k] for k in numbers} == pytest.approx(
            {k: theirs[k] for k in numbers}, rel=1e-9, abs=1e-9
        ), theirs
        assert {k: v for k, v in mine.items() if k not in numbers} == {
            k: v for k, v in theirs.items() if k not in numbers
        }


SCENARIOS = {
    "mixed": (Scenario("mixed", 900, error_rate=0.02), DEFAULTS, Decision.CONTINUE),
    "speedup": (Scenario("speedup", 900, tpot_ratio=0.6), PROMPT, Decision.PROMOTE),
    "quality drop": (Scenario("drop", 900, eval_drops=(0.3, 0.0)), QUICK, Decision.KILL),
    "collapse": (Scenario("collapse", 900, collapse_at=400), QUICK, Decision.KILL),
    # Conversations of 5-20 pairs interleaved, crossing batches (issue 39): folded, with
    # each episode's earlier pairs read again when a batch adds to it.
    "episodes": (
        Scenario("episodes", 900, tpot_ratio=0.6, episode_len=(5, 20), episode_icc=0.5),
        PROMPT,
        Decision.CONTINUE,  # 83 episodes: too few to prove the TTFT margin yet
    ),
    # Greedy mismatch (control slice per episode) and acceptance alike within
    # conversations: each greedy side's episode sums, and the collapse detectors reading
    # each episode's first pair, folded across batches as replay builds them.
    "episode rates": (
        Scenario("episode rates", 900, episode_len=(5, 20), episode_icc=0.5, rates_icc=0.5),
        PROMPT,
        Decision.CONTINUE,
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_batches_folded_between_gate_runs_equal_a_replay_from_scratch(pg_session, name):
    scenario, policy, final = SCENARIOS[name]
    records = sorted(recorded_pairs(scenario, policy), key=lambda r: r["evaluated_at"])
    rollout = factories.rollout(pg_session)
    for batch in batches(records):
        store(pg_session, batch, rollout.id)
        verdict = compute(pg_session, rollout=rollout, policy=policy)
        want_stats, want_verdict = replayed(pg_session, rollout.id, policy)
        assert_same_verdict(verdict, want_verdict)
        # A second run folds nothing new and reads the same state.
        state = fold(pg_session, rollout_id=rollout.id, stage=0, policy=policy)
        assert_same_stats(folded_stats(state, policy), want_stats)
    assert state.pairs == len(records) and state.warm_pairs == policy.warmup_pairs
    assert verdict.decision is final, verdict.summary
    if name == "collapse":
        assert any(code.startswith("kill:acceptance_collapse:") for code in verdict.reason_codes)
    if name == "episodes":  # judged with the episode as the unit, by the fold
        assert 45 <= folded_stats(state, policy).n_episodes < 180
        assert " episodes" in verdict.summary


def test_another_policy_refolds_from_scratch(pg_session):
    records = recorded_pairs()
    rollout_id = store(pg_session, records)
    fold(pg_session, rollout_id=rollout_id, stage=0, policy=DEFAULTS)
    state = fold(pg_session, rollout_id=rollout_id, stage=0, policy=QUICK)
    assert state.warm_pairs == QUICK.warmup_pairs
    assert_same_stats(folded_stats(state, QUICK), replayed(pg_session, rollout_id, QUICK)[0])


def test_a_pair_evaluated_twice_is_folded_once(pg_session):
    rollout = make_rollout(pg_session, policy={"warmup_pairs": 1})
    ok = GenerationStatus.OK
    sides = [(Cohort.BASELINE, RIGHT, ok), (Cohort.CANDIDATE, RIGHT, ok)]
    first, second = make_pair(pg_session, rollout, sides), make_pair(pg_session, rollout, sides)
    for pair in (first, second):
        evaluate_pair(pg_session, pair_id=pair.id)
    stamped = pg_session.scalar(select(Pair.evaluated_at).where(Pair.id == second.id))
    before = fold(pg_session, rollout_id=rollout.id, stage=0, policy=Policy(warmup_pairs=1))
    # At-least-once delivery: the task runs again; the stamp, and so the fold, stay put.
    evaluate_pair(pg_session, pair_id=second.id)
    assert pg_session.scalar(select(Pair.evaluated_at).where(Pair.id == second.id)) == stamped
    after = fold(pg_session, rollout_id=rollout.id, stage=0, policy=Policy(warmup_pairs=1))
    assert after == before and after.pairs == 2
    live = folded_stats(after, Policy(warmup_pairs=1)).cells[("eval:task", "all")]
    assert float(live.n) == 1.0  # the second pair, scored once


def closed_pair(session, rollout_id: int) -> Pair:
    pair = factories.pair(session, rollout_id)
    for cohort in (Cohort.BASELINE, Cohort.CANDIDATE):
        factories.generation(session, pair, cohort)
    complete_ready(session, pair_ids=[pair.id], enqueue=None)
    return pair


def test_a_fold_waits_for_stamps_in_flight_and_misses_none(pg_committing):
    policy = Policy(warmup_pairs=1)
    with pg_committing.begin() as session:
        rollout_id = factories.rollout(session).id
        first, second = closed_pair(session, rollout_id), closed_pair(session, rollout_id)
    folded: list[int] = []

    def gate_run() -> None:
        with pg_committing.begin() as session:
            folded.append(fold(session, rollout_id=rollout_id, stage=0, policy=policy).pairs)

    stamping = pg_committing()
    stamping.begin()
    stamp_evaluated(stamping, pair_ids=[first.id])  # stamped, not committed yet
    runner = threading.Thread(target=gate_run)
    runner.start()
    runner.join(timeout=1.0)
    assert runner.is_alive(), "the fold must wait for the stamp in flight"
    stamping.commit()
    runner.join(timeout=10)
    assert folded == [1]
    with pg_committing.begin() as session:
        stamp_evaluated(session, pair_ids=[second.id])
    gate_run()
    assert folded == [1, 2]
    with pg_committing() as session:
        assert session.scalar(select(GateFold.pairs)) == 2
