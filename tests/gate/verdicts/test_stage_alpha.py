"""The stored-pairs verdict spends the stage's share of alpha_kill, on both paths.

Postgres shadow rollouts fold pairs into stored statistics; SQLite (and canary) rollouts
replay them. Either way a rollout with four stages judges each at alpha_kill / 4: the
verdict equals a replay under a one-stage policy with that alpha, not one with the whole.
"""

from __future__ import annotations

import pytest

from gate.stats.policy import Policy
from gate.stats.replay import replay
from gate.stats.simulated_pairs import Scenario
from gate.verdicts.service import compute
from tests import factories
from tests.gate.stats.test_sql import recorded_pairs, store
from tests.gate.verdicts.test_folds import assert_same_verdict

# Decides within 900 pairs; the default four stages.
QUICK = Policy(warmup_pairs=100, min_pairs=300, min_duration_s=0)


@pytest.fixture(params=["postgres", "sqlite"])
def db(request):
    if request.param == "postgres":
        request.applymarker(pytest.mark.postgres)
        return request.getfixturevalue("pg_session")
    return request.getfixturevalue("sqlite_session")


def test_a_stage_verdict_spends_its_share_of_alpha_kill(db):
    records = recorded_pairs(Scenario("drop", 900, eval_drops=(0.04, 0.0)), QUICK)
    rollout = factories.rollout(db)
    store(db, records, rollout.id)
    got = compute(db, rollout=rollout, policy=QUICK)

    def one_stage(alpha_kill: float):
        policy = QUICK.model_copy(update={"stages": [100.0], "alpha_kill": alpha_kill})
        return replay(records, policy, every=len(records)).verdict

    want = one_stage(QUICK.alpha_kill / len(QUICK.stages))
    if db.get_bind().dialect.name == "postgresql":
        assert_same_verdict(got, want)  # the fold, to float tolerance (feedback not folded)
    else:
        assert got == want
    whole = one_stage(QUICK.alpha_kill)
    mine = {(c.metric, c.segment): c.lower for c in got.cells}
    assert any(mine[(c.metric, c.segment)] < c.lower for c in whole.cells)
