"""Replay, simulation and the Postgres fold agree across a stage boundary (issue 39).

An episode's first pair is its first in the whole rollout: a conversation begun in an
earlier stage opens nothing in the next one, so its next turn there is not read by the
collapse detectors and does not fix their warm-up level. The fold decides it by SQL
(`gate.verdicts.slices`, `opens`), the export writes it (`episode_continues`), replay and
simulation read it (`PairColumns.continues`).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gate.db.enums import RolloutMode
from gate.pairs.export import pair_records
from gate.stats.cumulative import at_look, to_stats
from gate.stats.fold_stats import to_stats as folded_stats
from gate.stats.record_columns import columns, fold_order
from gate.stats.rule import FEEDBACK
from gate.verdicts.folds import fold
from tests import factories
from tests.gate.stats.test_sql import store
from tests.gate.verdicts.paths_agree import (
    POLICY,
    _run,
    as_records,
    assert_same_stats,
    stacked,
)

pytestmark = pytest.mark.postgres
_names = itertools.count()
TWO_STAGES = POLICY.model_copy(update={"stages": [50.0, 100.0]})


def _pair(episode: str, accepted: int, k: int) -> dict:
    side = {"ttft_s": 0.2, "tpot_s": 0.02 + k / 1e4, "e2e_s": 1.0, "status": "ok",
            "evals": {"task": True}, "draft_tokens": 100, "accepted_tokens": accepted}  # fmt: skip
    baseline = {**side, "draft_tokens": 0}
    return {"segment": ["chat", "code"][k % 2], "baseline": baseline, "candidate": side,
            "lag_s": 0, "control": 1, "id_rank": 0, "episode": episode}  # fmt: skip


def test_an_episode_begun_in_an_earlier_stage_opens_nothing_on_any_path(pg_session):
    # Stage 0: episodes e0-e5. Stage 1: e3-e5 go on, e6-e9 begin; first turns accept 30 %,
    # later ones 90 %. In stage 1, e3-e5's turns are no first turns on any path.
    rng = np.random.default_rng(39)
    first: set[str] = set()
    raw = []
    for k, e in enumerate(
        rng.choice([f"e{i}" for i in range(6)], 30).tolist()
        + rng.choice([f"e{i}" for i in range(3, 10)], 40).tolist()
    ):
        raw.append(_pair(e, 90 - 60 * (e not in first) + k % 5, k))
        first.add(e)
    records = as_records(raw)
    for i, r in enumerate(records):
        r["stage"] = int(i >= 30)
    began = {r["episode"] for r in records[:30]}
    stage1 = fold_order([{**r, "episode_continues": r["episode"] in began} for r in records[30:]])
    cols = columns(stage1, TWO_STAGES, RolloutMode.SHADOW)
    assert cols.continues is not None and cols.continues.sum() > 5
    looks = np.array([len(stage1)])
    replayed = at_look(to_stats(cols, TWO_STAGES, looks), 0)
    simulated = at_look(to_stats(stacked(cols), TWO_STAGES, looks), 0)
    rollout = factories.rollout(pg_session, name=f"stages-{next(_names)}")
    store(pg_session, [dict(r) for r in records], rollout.id)
    state = fold(pg_session, rollout_id=rollout.id, stage=1, policy=TWO_STAGES)
    folded = folded_stats(state, TWO_STAGES)
    assert_same_stats(folded, replayed, skip={FEEDBACK})
    assert_same_stats(_run(simulated, 0), replayed)
    exported = list(pair_records(pg_session, rollout_id=rollout.id, stage=1))
    assert [r["episode_continues"] for r in exported] == [r["episode_continues"] for r in stage1]
    # Read as first turns, e3-e5's next turns would set another level and series.
    alone = [{**r, "episode_continues": False} for r in stage1]
    plain = at_look(to_stats(columns(alone, TWO_STAGES, RolloutMode.SHADOW), TWO_STAGES, looks), 0)
    assert any(not np.allclose(plain.collapse[k], replayed.collapse[k]) for k in replayed.collapse)
