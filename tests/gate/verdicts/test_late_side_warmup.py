"""A warm-up pair dropped at its deadline whose candidate lands after the warm-up was
fixed: the fold's acceptance-collapse level never read it; replay of the export must not."""

from __future__ import annotations

import uuid
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import insert
from sqlalchemy.orm import Session

from gate.db.enums import Cohort, RolloutMode
from gate.db.models import Generation
from gate.pairs.export import pair_records
from gate.stats.cumulative import at_look, to_stats
from gate.stats.fold_stats import to_stats as folded_stats
from gate.stats.record_columns import columns, fold_order
from gate.verdicts.folds import fold
from tests import factories
from tests.gate.stats.test_sql import store
from tests.gate.verdicts.paths_agree import POLICY, START, as_records, assert_same_stats

pytestmark = pytest.mark.postgres


def _records(first: int, n: int, dropped: set[int]) -> list[dict]:
    raw = []
    for i in range(first, first + n):
        ok = {"ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 1.0, "status": "ok",
              "evals": {"task": True}, "draft_tokens": 10,
              "accepted_tokens": 6 + i % 3}  # fmt: skip
        raw.append({"segment": "chat", "lag_s": 0, "control": 1, "id_rank": 0,
                    "baseline": ok, "candidate": None if i in dropped else dict(ok)})  # fmt: skip
    records = as_records(raw, episodes=False)
    for k, record in enumerate(records):
        record["created_at"] = record["evaluated_at"] = (
            START + timedelta(seconds=first + k)).isoformat()  # fmt: skip
    return records


def _stats(session, rollout_id):
    exported = list(pair_records(session, rollout_id=rollout_id, evaluated_only=True))
    cols = columns(fold_order(exported), POLICY, RolloutMode.SHADOW)
    return at_look(to_stats(cols, POLICY, np.array([len(exported)])), 0)


def land_late_candidate(
    session: Session, rollout_id: int, pair_id: uuid.UUID, *, output_tokens: int
) -> None:
    """A dropped pair's candidate call landing now, accepting 0 of its 10 drafted tokens."""
    session.execute(insert(Generation), [{
        "rollout_id": rollout_id, "pair_id": pair_id, "cohort": Cohort.CANDIDATE,
        "segment": "chat", "status": "ok", "ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 1.0,
        "spec_draft_tokens": 10, "spec_accepted_tokens": 0, "output_tokens": output_tokens,
        "trace_id": uuid.uuid4().hex, "span_id": uuid.uuid4().hex[:16]}])  # fmt: skip


def test_a_late_candidate_of_a_dropped_warm_up_pair_moves_no_collapse_level(pg_session):
    rollout_id = factories.rollout(pg_session, name="late-warm").id
    first = _records(0, 8, dropped={2})
    store(pg_session, first, rollout_id)
    folded = fold(pg_session, rollout_id=rollout_id, stage=0, policy=POLICY)  # warm-up fixed
    assert folded.warm_pairs >= POLICY.warmup_pairs
    # The dropped warm-up pair's candidate lands now (a span replayed from the spool):
    # accepted 0 of 10, a level the fold never read.
    late = uuid.UUID(first[2]["pair_id"])
    land_late_candidate(pg_session, rollout_id, late, output_tokens=20)
    store(pg_session, _records(8, 30, dropped=set()), rollout_id)
    got = folded_stats(fold(pg_session, rollout_id=rollout_id, stage=0, policy=POLICY), POLICY)
    assert got.collapse
    assert_same_stats(got, _stats(pg_session, rollout_id), skip={"feedback"})
