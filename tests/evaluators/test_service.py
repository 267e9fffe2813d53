"""The service on Postgres and SQLite: both cohorts scored, parity on the pair, idempotent."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select, update

from evaluators.service import PairNotComplete, evaluate_pair
from gate.db.enums import Cohort, GenerationStatus, PairState
from gate.db.models import Evaluation, Generation, Pair
from gate.errors import NotFound
from tests.evaluators.factories import RIGHT, make_pair, make_rollout


@pytest.fixture(params=[pytest.param("pg_session", marks=pytest.mark.postgres), "sqlite_session"])
def session(request):
    return request.getfixturevalue(request.param)


def stored(session, pair):
    rows = session.execute(
        select(Generation.cohort, Evaluation.evaluator, Evaluation.passed, Evaluation.details)
        .join(Evaluation, Evaluation.generation_id == Generation.id)
        .where(Generation.pair_id == pair.id)
        .order_by(Generation.cohort, Evaluation.evaluator)
    )
    return [(c.value, e, p, d) for c, e, p, d in rows]


OK = GenerationStatus.OK


def test_a_pair_becomes_evaluations_for_both_cohorts_and_parity(session):
    rollout = make_rollout(session)
    wrong = "The Halden line opened in 1897."
    pair = make_pair(
        session, rollout, [(Cohort.BASELINE, RIGHT, OK), (Cohort.CANDIDATE, wrong, OK)]
    )
    results = evaluate_pair(session, pair_id=pair.id)
    assert [r.inserted for r in results] == [True] * 5
    verdicts = [(c, e, p) for c, e, p, _ in stored(session, pair)]
    assert verdicts == [
        ("baseline", "groundedness", True),
        ("baseline", "task", True),
        ("candidate", "greedy_parity", False),
        ("candidate", "groundedness", False),
        ("candidate", "task", False),
    ]


def test_running_twice_stores_each_evaluation_once(session):
    rollout = make_rollout(session)
    pair = make_pair(
        session, rollout, [(Cohort.BASELINE, RIGHT, OK), (Cohort.CANDIDATE, RIGHT, OK)]
    )
    first = evaluate_pair(session, pair_id=pair.id)
    assert len(first) == 5 and all(r.inserted for r in first)
    # A redelivered task finds the pair stamped and scores nothing again.
    assert evaluate_pair(session, pair_id=pair.id) == []
    assert len(stored(session, pair)) == 5
    # A run that died after storing some rows but before the stamp keeps what it stored.
    session.execute(update(Pair).where(Pair.id == pair.id).values(evaluated_at=None))
    again = evaluate_pair(session, pair_id=pair.id)
    assert [r.inserted for r in again] == [False] * 5
    assert len(stored(session, pair)) == 5


def test_a_side_that_timed_out_fails_every_evaluator(session):
    rollout = make_rollout(session)
    pair = make_pair(
        session,
        rollout,
        [(Cohort.BASELINE, RIGHT, OK), (Cohort.CANDIDATE, None, GenerationStatus.TIMEOUT)],
    )
    evaluate_pair(session, pair_id=pair.id)
    candidate = [(e, p, d["reason"]) for c, e, p, d in stored(session, pair) if c == "candidate"]
    assert candidate == [
        ("greedy_parity", False, "generation_timeout"),
        ("groundedness", False, "generation_timeout"),
        ("task", False, "generation_timeout"),
    ]


def test_the_control_slice_gets_parity_against_its_baseline(session):
    rollout = make_rollout(session)
    pair = make_pair(session, rollout, [(Cohort.BASELINE, RIGHT, OK), (Cohort.CONTROL, RIGHT, OK)])
    evaluate_pair(session, pair_id=pair.id)
    parity = [(c, p) for c, e, p, _ in stored(session, pair) if e == "greedy_parity"]
    assert parity == [("control", True)]


def test_the_rollout_policy_chooses_the_evaluators(session):
    rollout = make_rollout(session, policy={"evaluators": ["groundedness"]})
    pair = make_pair(
        session, rollout, [(Cohort.BASELINE, RIGHT, OK), (Cohort.CANDIDATE, RIGHT, OK)]
    )
    evaluate_pair(session, pair_id=pair.id)
    assert {e for _, e, _, _ in stored(session, pair)} == {"groundedness"}


def test_evaluators_that_do_not_apply_store_nothing(session):
    rollout = make_rollout(session)
    body = {"temperature": 0.8, "messages": [{"role": "user", "content": "Write a haiku."}]}
    pair = make_pair(
        session,
        rollout,
        [(Cohort.BASELINE, "Snow on pines", OK), (Cohort.CANDIDATE, "Rain on roofs", OK)],
        body=body,
        inputs={},
    )
    assert evaluate_pair(session, pair_id=pair.id) == []


def test_open_and_unknown_pairs_are_refused(session):
    rollout = make_rollout(session)
    pair = make_pair(session, rollout, [(Cohort.BASELINE, RIGHT, OK)], state=PairState.OPEN)
    with pytest.raises(PairNotComplete):
        evaluate_pair(session, pair_id=pair.id)
    with pytest.raises(NotFound):
        evaluate_pair(session, pair_id=uuid.uuid4())


@pytest.mark.parametrize("status", [GenerationStatus.FALLBACK, GenerationStatus.ERROR])
def test_a_route_failure_with_empty_output_fails_every_evaluator(session, status):
    # A canary call that fell back left no answer: groundedness must not pass it.
    rollout = make_rollout(session)
    pair = make_pair(
        session, rollout, [(Cohort.BASELINE, RIGHT, OK), (Cohort.CANDIDATE, "", status)]
    )
    evaluate_pair(session, pair_id=pair.id)
    candidate = [(e, p, d["reason"]) for c, e, p, d in stored(session, pair) if c == "candidate"]
    reason = f"generation_{status.value}"
    assert candidate == [
        ("greedy_parity", False, reason),
        ("groundedness", False, reason),
        ("task", False, reason),
    ]


@pytest.mark.parametrize("status", [GenerationStatus.DROPPED, GenerationStatus.CANCELLED])
def test_a_side_not_attributable_to_its_route_gets_no_result(session, status):
    rollout = make_rollout(session)
    pair = make_pair(
        session, rollout, [(Cohort.BASELINE, RIGHT, OK), (Cohort.CANDIDATE, "", status)]
    )
    evaluate_pair(session, pair_id=pair.id)
    # Neither a pass nor a fail for the dropped side, and no parity against it.
    assert [(c, e, p) for c, e, p, _ in stored(session, pair)] == [
        ("baseline", "groundedness", True),
        ("baseline", "task", True),
    ]


@pytest.mark.parametrize(
    ("seeds", "want"),
    [((None, None), {"mean_logprob": -0.5, "length": 0.0}), ((7, 7), {}), ("greedy", {})],
)
def test_the_stamp_stores_the_pairs_parity_differences(session, seeds, want):
    # Computed once, where the pair is stamped for the gate, by the rule replay uses: the
    # fold sums them (an eligible pair), or finds none (a shared seed, a greedy pair).
    rollout = make_rollout(session)
    pair = make_pair(
        session, rollout, [(Cohort.BASELINE, RIGHT, OK), (Cohort.CANDIDATE, RIGHT, OK)]
    )
    rows = session.scalars(select(Generation).where(Generation.pair_id == pair.id)).all()
    for g in rows:
        candidate = g.cohort is Cohort.CANDIDATE
        g.temperature = 0.0 if seeds == "greedy" else 0.8
        g.seed = None if seeds == "greedy" else seeds[candidate]
        g.top_p, g.max_tokens, g.finish_reason = 1.0, 64, "stop"
        g.output_tokens = g.logprob_tokens = 10
        g.logprob_sum = -10.0 if candidate else -5.0
    session.flush()
    evaluate_pair(session, pair_id=pair.id)
    session.refresh(pair)
    assert pair.parity == want


def test_a_pair_without_sampling_settings_stores_no_parity(session):
    rollout = make_rollout(session)
    pair = make_pair(
        session, rollout, [(Cohort.BASELINE, RIGHT, OK), (Cohort.CANDIDATE, RIGHT, OK)]
    )
    session.execute(
        update(Generation).where(Generation.pair_id == pair.id).values(temperature=None)
    )
    evaluate_pair(session, pair_id=pair.id)
    session.refresh(pair)
    assert pair.evaluated_at is not None and pair.parity is None
