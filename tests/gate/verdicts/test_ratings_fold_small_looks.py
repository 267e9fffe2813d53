"""Ratings folded over looks that start inside the warm-up, small batches."""

from __future__ import annotations

import numpy as np
import pytest

from tests import factories
from tests.gate.stats.test_sql import store
from tests.gate.verdicts.paths_agree import assert_same_stats
from tests.gate.verdicts.test_ratings_fold import _batch, _look, _rate, _replayed

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_small_looks_from_inside_the_warm_up_equal_replay(pg_session, seed):
    rng = np.random.default_rng(seed)
    rollout_id = factories.rollout(pg_session, name=f"small-{seed}").id
    first = 0
    for n in (2, 3, 2, 5, 1, 7, 4):
        store(pg_session, _batch(rng, n, first), rollout_id)
        first += n
        _rate(pg_session, rollout_id, rng, 0.3)
        got = _look(pg_session, rollout_id)
        assert_same_stats(got, _replayed(pg_session, rollout_id))
    rated_cell = got.cells[("feedback", "all")]
    assert rated_cell.baseline.n + rated_cell.candidate.n > 0


from gate.db.enums import RolloutMode  # noqa: E402
from gate.pairs.export import pair_records  # noqa: E402
from gate.stats.cumulative import at_look, to_stats  # noqa: E402
from gate.stats.fold_stats import to_stats as folded_stats  # noqa: E402
from gate.stats.record_columns import columns, fold_order  # noqa: E402
from gate.verdicts.folds import feedback_sums, fold_arm  # noqa: E402
from tests.gate.verdicts.paths_agree import POLICY  # noqa: E402


@pytest.mark.parametrize("seed", [4, 5])
def test_arms_ratings_equal_each_arms_replay(pg_session, seed):
    rng = np.random.default_rng(seed)
    rollout_id = factories.rollout(pg_session, name=f"arms-{seed}").id
    first = 0
    for n in (5, 9, 3, 12, 6):
        records = _batch(rng, n, first)
        for k, record in enumerate(records):
            record["arm"] = ["a", "b", None][(first + k) % 3]
            if record["arm"] is None:
                record["is_control"] = True
        store(pg_session, records, rollout_id)
        first += n
        _rate(pg_session, rollout_id, rng, 0.3)
        exported = list(pair_records(pg_session, rollout_id=rollout_id, evaluated_only=True))
        for arm in ("a", "b"):
            state, _ = fold_arm(pg_session, rollout_id=rollout_id, stage=0, arm=arm, policy=POLICY)
            rated = feedback_sums(
                pg_session, rollout_id=rollout_id, stage=0, state=state, policy=POLICY, arm=arm
            )
            got = folded_stats(state, POLICY, feedback=rated)
            mine = [r for r in exported if r.get("arm") in (arm, None)]
            cols = columns(fold_order(mine), POLICY, RolloutMode.SHADOW)
            want = at_look(to_stats(cols, POLICY, np.array([len(mine)])), 0)
            assert_same_stats(got, want)
    rated_cell = got.cells[("feedback", "all")]
    assert rated_cell.baseline.n + rated_cell.candidate.n > 0
