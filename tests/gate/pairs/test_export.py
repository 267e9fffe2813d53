"""Pair records come in fold order: evaluated pairs by (evaluated_at, id), then the rest."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from sqlalchemy.orm import sessionmaker

from gate.db.base import utcnow
from gate.db.engine import make_engine
from gate.db.enums import Cohort, PairState
from gate.db.models import Pair, RequestRecord
from gate.pairs.export import pair_records
from gate.rehearse import workload
from tests import factories


@pytest.fixture(params=[pytest.param("pg_session", marks=pytest.mark.postgres), "sqlite_session"])
def session(request):
    return request.getfixturevalue(request.param)


def test_records_follow_fold_order_and_can_leave_out_unevaluated_pairs(session):
    rollout = factories.rollout(session)
    now = utcnow()
    pairs = []
    # Created oldest first; evaluated newest first, one never; two share a stamp.
    for created_s, evaluated_s in ((0, 30), (10, 20), (20, 20), (30, None)):
        pair = factories.pair(session, rollout.id)
        factories.generation(session, pair, Cohort.BASELINE)
        factories.generation(session, pair, Cohort.CANDIDATE)
        pair.state = PairState.COMPLETE
        pair.created_at = now + timedelta(seconds=created_s)
        pair.evaluated_at = None if evaluated_s is None else now + timedelta(seconds=evaluated_s)
        pairs.append(pair)
    session.flush()
    tied = sorted([pairs[1], pairs[2]], key=lambda p: p.id)
    want = [str(p.id) for p in (*tied, pairs[0], pairs[3])]
    records = list(pair_records(session, rollout_id=rollout.id, stage=0))
    assert [r["pair_id"] for r in records] == want
    assert records[-1]["evaluated_at"] is None and records[0]["evaluated_at"] is not None
    evaluated = pair_records(session, rollout_id=rollout.id, stage=0, evaluated_only=True)
    assert [r["pair_id"] for r in evaluated] == want[:3]


def test_records_with_requests_carry_the_kept_body_and_what_was_cut(session):
    rollout = factories.rollout(session)
    body = {"model": "m", "messages": [{"role": "user", "content": "fix this"}]}
    for truncated in (None, ["body"]):
        request = RequestRecord(
            id=uuid.uuid4(),
            rollout_id=rollout.id,
            body=body,
            inputs={"reference": "r"},
            truncated=truncated,
        )
        session.add(request)
        session.flush()
        pair = factories.pair(session, rollout.id)
        pair.request_id, pair.state, pair.segment = request.id, PairState.COMPLETE, "proofread"
    session.flush()
    plain = list(pair_records(session, rollout_id=rollout.id))
    assert all("request" not in r for r in plain)  # the replay schema is unchanged by default
    records = list(pair_records(session, rollout_id=rollout.id, with_requests=True))
    assert sorted(str(r["request"]["truncated"]) for r in records) == ["None", "['body']"]
    found = workload.parse("\n".join(json.dumps(r) for r in records), source="pairs.jsonl")
    assert found.cut == 1 and len(found.items) == 1
    assert found.items[0].segment == "proofread"
    assert found.items[0].engine_body == body


def test_an_evaluator_never_evaluable_is_exported_as_null_and_versions_combine_as_the_fold(
    session,
):
    """The fold sees an evaluator whose results were all not evaluable (bool_and of nulls);
    the export keeps it as null so a replay sees it too. Evaluable versions combine as
    bool_and: one failed version fails, null versions are neither."""
    from gate.db.models import Evaluation

    rollout = factories.rollout(session)
    pair = factories.pair(session, rollout.id)
    base = factories.generation(session, pair, Cohort.BASELINE)
    cand = factories.generation(session, pair, Cohort.CANDIDATE)
    pair.state, pair.evaluated_at = PairState.COMPLETE, utcnow()
    session.flush()
    results = {
        base: [("task", None), ("schema", True), ("schema", None)],
        cand: [("task", None), ("task", None), ("schema", None), ("schema", False)],
    }
    for generation, found in results.items():
        for i, (name, passed) in enumerate(found):
            session.add(
                Evaluation(
                    generation_id=generation.id, generation_started_at=generation.started_at,
                    evaluator=name, version=str(i), passed=passed,
                    not_evaluable=None if passed is not None else "truncated", details={},
                )
            )  # fmt: skip
    session.flush()
    (record,) = pair_records(session, rollout_id=rollout.id, stage=0)
    assert record["baseline"]["evals"] == {"task": None, "schema": True}
    assert record["candidate"]["evals"] == {"task": None, "schema": False}


def test_each_side_carries_its_exactness_fields_or_null(session):
    from gate.exactness_fit import BINS, TokenFit

    fit = TokenFit(2, (1.25, 0.75, *([0.0] * (BINS - 2))), cut=0, skipped=1).as_dict()
    rollout = factories.rollout(session)
    pair = factories.pair(session, rollout.id)
    factories.generation(session, pair, Cohort.BASELINE)
    factories.generation(session, pair, Cohort.CANDIDATE).exactness = fit
    pair.state = PairState.COMPLETE
    session.flush()
    (record,) = pair_records(session, rollout_id=rollout.id, stage=0)
    assert record["candidate"]["exactness"] == fit
    assert TokenFit.from_dict(record["candidate"]["exactness"]).tokens == 2
    assert record["baseline"]["exactness"] is None


def test_a_later_stages_records_say_which_episodes_began_earlier(session):
    # `episode_continues` (issue 39) on every store the export runs on, SQLite included:
    # conv-1 has a pair in stage 0, conv-2 begins in stage 1.
    rollout = factories.rollout(session)
    now = utcnow()
    for k, (stage, episode) in enumerate(((0, "conv-1"), (1, "conv-1"), (1, "conv-2"))):
        pair = factories.pair(session, rollout.id)
        factories.generation(session, pair, Cohort.BASELINE)
        factories.generation(session, pair, Cohort.CANDIDATE)
        pair.state, pair.stage, pair.episode = PairState.COMPLETE, stage, episode
        pair.created_at = pair.evaluated_at = now + timedelta(seconds=k)
    session.flush()
    records = list(pair_records(session, rollout_id=rollout.id, stage=1))
    assert [(r["episode"], r["episode_continues"]) for r in records] == [
        ("conv-1", True),
        ("conv-2", False),
    ]


@pytest.fixture(params=[pytest.param("pg", marks=pytest.mark.postgres), "sqlite"])
def committing(request):
    """A committing session factory, so that a second session's writes are seen."""
    if request.param == "pg":
        return request.getfixturevalue("pg_committing")
    engine = make_engine(request.getfixturevalue("sqlite_url"))
    request.addfinalizer(engine.dispose)
    return sessionmaker(engine, expire_on_commit=False)


def test_a_pair_evaluated_while_the_export_runs_is_exported_once(committing):
    """The export reads evaluated pairs, then waiting ones: two queries. A pair that a
    worker stamps between them (stamped before the first query's cursor, as a transaction
    that took its clock earlier and commits later does) must still come out, exactly once:
    both orders are read from one snapshot."""
    now = utcnow()
    with committing() as db, db.begin():
        rollout = factories.rollout(db)
        pairs = []
        for k in range(2):
            pair = factories.pair(db, rollout.id)
            factories.generation(db, pair, Cohort.BASELINE)
            factories.generation(db, pair, Cohort.CANDIDATE)
            pair.state, pair.created_at = PairState.COMPLETE, now + timedelta(seconds=k)
            pairs.append(pair)
        pairs[0].evaluated_at = now + timedelta(seconds=20)
    with committing() as reader:
        records = pair_records(reader, rollout_id=rollout.id, stage=0)
        first = next(records)  # the evaluated pair; its query's cursor is past +20 s
        with committing() as worker, worker.begin():
            worker.get(Pair, pairs[1].id).evaluated_at = now + timedelta(seconds=10)
        rest = list(records)
    assert [r["pair_id"] for r in (first, *rest)] == [str(pairs[0].id), str(pairs[1].id)]
