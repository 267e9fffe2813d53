"""The export on a session bound to the engine (its own REPEATABLE READ connection)."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import update

from gate.db.models import Pair
from gate.pairs.export import pair_records
from tests import factories
from tests.gate.stats.test_sql import store
from tests.gate.verdicts.test_ratings_fold import _batch

pytestmark = pytest.mark.postgres


def test_export_on_an_engine_bound_session_reads_both_orders(pg_committing):
    with pg_committing() as db, db.begin():
        rollout_id = factories.rollout(db, name="engine").id
        records = _batch(np.random.default_rng(1), 12, 0)
        store(db, records, rollout_id)
        db.execute(
            update(Pair)
            .where(Pair.rollout_id == rollout_id, Pair.id.in_([r["pair_id"] for r in records[:4]]))
            .values(evaluated_at=None)
        )
    with pg_committing() as db:
        gen = pair_records(db, rollout_id=rollout_id)
        first = next(gen)
        gen.close()  # abandoned mid-way
        assert first["pair_id"]
        got = list(pair_records(db, rollout_id=rollout_id))
        assert len(got) == 12
        assert sum(r["evaluated_at"] is None for r in got) == 4
        assert all(r["dropped"] in (True, False) for r in got)


def test_export_on_an_engine_bound_session_sees_the_rows_it_wrote(pg_committing):
    """`Storage.snapshot`'s contract: rows the caller's session wrote stay visible to the
    read. A session bound to the engine that closed a pair (flushed or still pending) and
    exports before committing must export it, as on SQLite and on a connection-bound one."""
    with pg_committing() as db, db.begin():
        rollout_id = factories.rollout(db, name="wrote").id
        store(db, _batch(np.random.default_rng(2), 3, 0), rollout_id)
    with pg_committing() as db, db.begin():
        records = _batch(np.random.default_rng(3), 2, 0)
        store(db, records, rollout_id)  # this transaction's, not committed yet
        got = list(pair_records(db, rollout_id=rollout_id))
        assert len(got) == 5
        assert {r["pair_id"] for r in records} <= {r["pair_id"] for r in got}
