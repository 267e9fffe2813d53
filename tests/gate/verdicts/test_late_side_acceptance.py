"""An arm's acceptance length (folded, `gate.verdicts.acceptance`) and replay's
(`gate.stats.arms_replay.acceptance_of`) when a dropped pair's candidate lands after it
was folded: the fold never read it, so replay of the export must not either."""

from __future__ import annotations

import uuid

import pytest

from gate.pairs.export import pair_records
from gate.stats.arms_replay import acceptance_of
from gate.stats.record_columns import fold_order
from gate.verdicts.folds import fold_arm
from tests import factories
from tests.gate.stats.test_sql import store
from tests.gate.verdicts.paths_agree import POLICY
from tests.gate.verdicts.test_late_side_warmup import _records, land_late_candidate


def _armed(first: int, n: int, dropped: set[int]) -> list[dict]:
    records = _records(first, n, dropped)
    for record in records:
        record["arm"] = "a"
        for side in ("baseline", "candidate"):
            if record[side] is not None:
                record[side]["output_tokens"] = 30
    return records


def test_a_late_candidate_of_a_dropped_pair_is_in_neither_acceptance_length(pg_session):
    rollout_id = factories.rollout(pg_session, name="late-acc").id
    first = _armed(0, 8, dropped={3})
    store(pg_session, first, rollout_id)
    fold_arm(pg_session, rollout_id=rollout_id, stage=0, arm="a", policy=POLICY)
    late = uuid.UUID(first[3]["pair_id"])
    land_late_candidate(pg_session, rollout_id, late, output_tokens=30)
    store(pg_session, _armed(8, 10, dropped=set()), rollout_id)
    _, sums = fold_arm(pg_session, rollout_id=rollout_id, stage=0, arm="a", policy=POLICY)
    exported = fold_order(list(pair_records(pg_session, rollout_id=rollout_id,
                                            evaluated_only=True)))  # fmt: skip
    got, want = sums.acceptance.length(), acceptance_of(exported)
    assert got.requests == want.requests
    assert got.length == pytest.approx(want.length, rel=1e-12)
