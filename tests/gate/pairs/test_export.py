"""Pair records come in fold order: evaluated pairs by (evaluated_at, id), then the rest."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gate.db.base import utcnow
from gate.db.enums import Cohort, PairState
from gate.pairs.export import pair_records
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
