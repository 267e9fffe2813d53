"""Pairs complete when their sides land, drop at their deadline, and enqueue after commit."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gate.db.base import utcnow
from gate.db.enums import Cohort, PairState, RolloutMode
from gate.pairs.service import complete_ready, requeue_unevaluated, sweep_deadlines
from tests import factories

pytestmark = pytest.mark.postgres


def test_a_shadow_pair_completes_only_with_both_sides(pg_session):
    rollout = factories.rollout(pg_session)
    pair = factories.pair(pg_session, rollout.id)
    factories.generation(pg_session, pair, Cohort.BASELINE)
    assert complete_ready(pg_session, pair_ids=[pair.id], enqueue=None) == []
    factories.generation(pg_session, pair, Cohort.CANDIDATE)
    assert complete_ready(pg_session, pair_ids=[pair.id], enqueue=None) == [pair.id]
    pg_session.refresh(pair)
    assert pair.state is PairState.COMPLETE and pair.completed_at is not None
    assert complete_ready(pg_session, pair_ids=[pair.id], enqueue=None) == []


def test_a_control_pair_needs_the_second_baseline_call(pg_session):
    rollout = factories.rollout(pg_session)
    pair = factories.pair(pg_session, rollout.id, is_control=True)
    factories.generation(pg_session, pair, Cohort.BASELINE)
    factories.generation(pg_session, pair, Cohort.CANDIDATE)  # not what a control pair needs
    assert complete_ready(pg_session, pair_ids=[pair.id], enqueue=None) == []
    factories.generation(pg_session, pair, Cohort.CONTROL)
    assert complete_ready(pg_session, pair_ids=[pair.id], enqueue=None) == [pair.id]


def test_a_canary_pair_completes_with_its_one_call(pg_session):
    rollout = factories.rollout(pg_session, mode=RolloutMode.CANARY)
    pair = factories.pair(pg_session, rollout.id)
    factories.generation(pg_session, pair, Cohort.CANDIDATE)
    assert complete_ready(pg_session, pair_ids=[pair.id], enqueue=None) == [pair.id]


def test_pairs_past_their_deadline_are_dropped(pg_session):
    rollout = factories.rollout(pg_session)
    late = factories.pair(pg_session, rollout.id, deadline_in_s=-1)
    on_time = factories.pair(pg_session, rollout.id)
    factories.generation(pg_session, late, Cohort.BASELINE)
    assert sweep_deadlines(pg_session) == 1
    pg_session.refresh(late)
    pg_session.refresh(on_time)
    assert (late.state, on_time.state) == (PairState.DROPPED, PairState.OPEN)
    # A dropped pair gets no evaluations: it is ready for the gate at once; an open one is not.
    assert late.evaluated_at is not None and on_time.evaluated_at is None


def test_evaluation_is_enqueued_only_after_commit(pg_committing):
    enqueued: list = []
    with pg_committing() as session:
        with session.begin():
            rollout = factories.rollout(session)
            pair = factories.pair(session, rollout.id)
            factories.generation(session, pair, Cohort.BASELINE)
            factories.generation(session, pair, Cohort.CANDIDATE)
            other = factories.pair(session, rollout.id)
            factories.generation(session, other, Cohort.BASELINE)
            factories.generation(session, other, Cohort.CANDIDATE)
        with session.begin():
            complete_ready(session, pair_ids=[pair.id], enqueue=enqueued.extend)
            assert enqueued == []
        assert enqueued == [pair.id]
        session.begin()
        assert complete_ready(session, pair_ids=[other.id], enqueue=enqueued.extend) == [other.id]
        session.rollback()
        assert enqueued == [pair.id]


def test_a_pair_whose_completion_was_missed_completes_at_its_deadline(pg_committing):
    enqueued: list = []
    with pg_committing() as session:
        with session.begin():
            rollout = factories.rollout(session)
            missed = factories.pair(session, rollout.id, deadline_in_s=-1)
            factories.generation(session, missed, Cohort.BASELINE)
            factories.generation(session, missed, Cohort.CANDIDATE)
            half = factories.pair(session, rollout.id, deadline_in_s=-1)
            factories.generation(session, half, Cohort.BASELINE)
        with session.begin():
            assert sweep_deadlines(session, enqueue=enqueued.extend) == 1
        assert enqueued == [missed.id]  # after commit, as a normal completion
        session.refresh(missed)
        session.refresh(half)
        assert (missed.state, half.state) == (PairState.COMPLETE, PairState.DROPPED)
        assert missed.evaluated_at is None and half.evaluated_at is not None


def test_complete_pairs_never_evaluated_are_enqueued_again_with_back_off(pg_committing):
    now = utcnow()
    enqueued: list = []
    with pg_committing() as session:
        with session.begin():
            rollout = factories.rollout(session)
            pairs = {}
            for name, completed_ago_s, evaluated in (
                ("lost", 400, False),
                ("older_lost", 3000, False),
                ("in_flight", 100, False),
                ("evaluated", 400, True),
            ):
                row = factories.pair(session, rollout.id)
                row.state = PairState.COMPLETE
                row.completed_at = now - timedelta(seconds=completed_ago_s)
                row.evaluated_at = now if evaluated else None
                pairs[name] = row
            factories.pair(session, rollout.id)  # open: not complete yet

        def sweep(at_s: float) -> list:
            with session.begin():
                return requeue_unevaluated(
                    session,
                    enqueue=enqueued.extend,
                    after_s=300,
                    max_requeues=2,
                    now=now + timedelta(seconds=at_s),
                )

        lost = [pairs["older_lost"].id, pairs["lost"].id]  # oldest first
        assert sweep(0) == lost and enqueued == lost  # enqueued once committed
        assert sweep(1) == []  # claimed: the next try waits 2 x 300 s
        assert set(sweep(601)) == {*lost, pairs["in_flight"].id}
        assert sweep(1200) == []  # the in-flight pair's second try is due 2 x 300 s after 601
        # Two tries each: the lost pairs are given up; the in-flight one gets its second.
        assert sweep(1802) == [pairs["in_flight"].id]
        assert sweep(10_000) == []
        assert enqueued.count(pairs["lost"].id) == 2
