"""Reads of one pair's or one call's generations on a time-partitioned `generations`
(issue 43): completing a pair, fixing its parity, finding the generation feedback names
and joining vLLM's facts each read only the partitions near the pair's or call's time,
never the table's whole history (EXPLAIN on real Postgres)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from evaluators.service import evaluate_pair
from gate.db import partitions, storage
from gate.db.base import utcnow
from gate.db.enums import Cohort, GenerationStatus, PairState
from gate.db.models import Generation, Pair
from gate.db.rows import EngineFacts
from gate.errors import NotFound
from gate.feedback import service as feedback
from gate.pairs import parity
from gate.pairs.service import complete_ready
from tests import factories
from tests.evaluators.factories import RIGHT, make_pair, make_rollout
from tests.gate.verdicts.test_partitioned_pairs import DAY, partition_by_day
from tests.plans import explain, statements

pytestmark = pytest.mark.postgres
OK = GenerationStatus.OK
TODAY = partitions.floor(utcnow(), DAY)
DAYS = [TODAY + timedelta(days=d) for d in (-3, -2, -1, 0)]
# A pair's bound (its start less a slack) may reach the day before; older days never.


@pytest.fixture
def engine(fresh_pg_engine: Engine) -> Engine:
    partition_by_day(fresh_pg_engine, "generations", "started_at", DAYS)
    return fresh_pg_engine


def served_pair(session: Session) -> tuple[Pair, Generation]:
    """An open shadow pair of now whose two calls landed; return it and its baseline."""
    rollout = factories.rollout(session)
    pair = factories.pair(session, rollout.id)
    baseline = factories.generation(session, pair, Cohort.BASELINE)
    factories.generation(session, pair, Cohort.CANDIDATE)
    baseline.response_id = "chatcmpl-1"
    session.flush()
    return pair, baseline


def assert_recent_only(
    session: Session, seen: list[tuple[str, object]], table: str = "generations"
) -> None:
    assert seen
    older = [partitions.partition_name(table, day) for day in DAYS[:2]]
    for statement, parameters in seen:
        plan = explain(session.connection(), statement, parameters)
        assert partitions.partition_name(table, TODAY) in plan, statement
        assert not [name for name in older if name in plan], statement


def test_completing_and_stamping_a_pair_read_only_recent_partitions(engine: Engine) -> None:
    with Session(engine) as session:
        pair, _ = served_pair(session)
        with statements(session.connection(), "generations") as seen:
            assert complete_ready(session, pair_ids=[pair.id], enqueue=None) == [pair.id]
        assert_recent_only(session, seen)
        assert session.get(Pair, pair.id).state == PairState.COMPLETE  # type: ignore[union-attr]
        with statements(session.connection(), "generations") as seen:
            parity.record(session, pair_ids=[pair.id])
        assert_recent_only(session, seen)


def test_feedback_finds_its_generation_reading_only_recent_partitions(engine: Engine) -> None:
    week_ago = TODAY - feedback.FEEDBACK_WINDOW - timedelta(days=1)
    with engine.begin() as conn:
        partitions.create_partition(conn, "generations", "started_at", week_ago, DAY)
    with Session(engine) as session:
        pair, baseline = served_pair(session)
        conn = session.connection()
        with statements(conn, "generations") as seen:
            row = feedback.record(session, response_id=None, pair_id=pair.id, **RATING)
        assert row.generation_id == baseline.id
        assert_recent_only(session, seen)
        # A response id says nothing of when: the lookup reads the feedback window only.
        with statements(conn, "generations") as seen:
            row = feedback.record(session, response_id="chatcmpl-1", pair_id=None, **RATING)
        assert row.generation_id == baseline.id
        plans = [explain(conn, statement, parameters) for statement, parameters in seen]
        assert plans and partitions.partition_name("generations", TODAY) in plans[0]
        assert partitions.partition_name("generations", week_ago) not in plans[0]


RATING: dict[str, Any] = {"thumbs": 1, "score": None, "escalated": False, "comment": None}


def test_vllm_facts_join_their_generation_reading_only_recent_partitions(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Session(engine) as session:
        _, baseline = served_pair(session)
        facts: list[EngineFacts] = [
            {"trace_id": baseline.trace_id, "parent_span_id": baseline.span_id,
             "started_at": baseline.started_at + timedelta(milliseconds=3), "queue_s": 0.25,
             "input_tokens": 7, "output_tokens": 9}
        ]  # fmt: skip
        conn = session.connection()
        with statements(conn, "generations", monkeypatch) as seen:
            storage.of(engine).fill_engine_facts(conn, facts)
        assert_recent_only(session, seen)
        session.refresh(baseline)
        assert (baseline.queue_s, baseline.input_tokens) == (0.25, 7)


def test_evaluating_a_pair_reads_only_recent_partitions(engine: Engine) -> None:
    partition_by_day(engine, "requests", "created_at", DAYS)
    with Session(engine) as session:
        pair = make_pair(
            session,
            make_rollout(session),
            [(Cohort.BASELINE, RIGHT, OK), (Cohort.CANDIDATE, RIGHT, OK)],
        )
        conn = session.connection()
        with (
            statements(conn, "FROM generations") as calls,
            statements(conn, "FROM requests") as asked,
        ):
            assert evaluate_pair(session, pair_id=pair.id)
        assert_recent_only(session, calls)
        assert_recent_only(session, asked, "requests")


def test_feedback_by_an_older_response_id_is_a_404_naming_the_window(engine: Engine) -> None:
    week_ago = TODAY - feedback.FEEDBACK_WINDOW - timedelta(days=1)
    with engine.begin() as conn:
        partitions.create_partition(conn, "generations", "started_at", week_ago, DAY)
    with Session(engine) as session:
        _, baseline = served_pair(session)
        baseline.started_at = utcnow() - feedback.FEEDBACK_WINDOW + timedelta(hours=1)
        session.flush()
        assert feedback.record(session, response_id="chatcmpl-1", pair_id=None, **RATING)
        baseline.started_at = utcnow() - feedback.FEEDBACK_WINDOW - timedelta(hours=1)
        session.flush()
        with pytest.raises(NotFound, match="chatcmpl-1 in the last 7 days"):
            feedback.record(session, response_id="chatcmpl-1", pair_id=None, **RATING)
