"""Replay and the Postgres fold agree on sampled-output parity, its control cells, answer
statistics and repetition loops (`paths_agree`'s streams, every side sampled)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gate.db.enums import RolloutMode
from gate.pairs.export import pair_records
from gate.stats.cumulative import at_look, to_stats
from gate.stats.fold_stats import to_stats as folded_stats
from gate.stats.record_columns import columns, fold_order
from gate.stats.replay import replay
from gate.stats.rule import FEEDBACK
from gate.verdicts.folds import fold
from gate.verdicts.service import compute
from tests import factories
from tests.gate.stats.test_sql import as_floats, store
from tests.gate.verdicts.paths_agree import (
    POLICY,
    RTOL,
    as_records,
    assert_same_stats,
    assert_same_verdict,
    sampled_ok,
)

pytestmark = pytest.mark.postgres
_names = itertools.count()

# Every side sampled, most pairs eligible: the parity cells, their warm-up scale and the
# control slice's alarm cells are exercised on every example, with ineligible pairs
# (greedy, other limits, a shared seed, cut, logprobs on one side or incomplete) mixed in.
parity_pair = st.fixed_dictionaries(
    {
        "segment": st.sampled_from(["chat", "code", "unlisted"]),
        "baseline": sampled_ok,
        "candidate": st.one_of(*[sampled_ok] * 9, st.none()),
        "lag_s": st.integers(0, 40),
        "control": st.integers(0, 3),
        "id_rank": st.integers(0, 2**32 - 1),
        # Most pairs their own episode; the others in a few shared ones (issue 39).
        "episode": st.sampled_from([None] * 5 + ["a", "b", "c"]),
    }
)
PARITY_POLICY = POLICY.model_copy(update={"warmup_pairs": 12})


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=st.lists(parity_pair, min_size=20, max_size=60))
def test_the_fold_builds_the_parity_and_control_cells_as_replay_does(pg_session, raw):
    # Parity's cells and its control cells carry episode sums too (issue 39).
    policy, records = PARITY_POLICY, as_records(raw)
    cols = columns(fold_order(records), policy, RolloutMode.SHADOW)
    replayed = at_look(to_stats(cols, policy, np.array([len(records)])), 0)
    rollout = factories.rollout(pg_session, name=f"parity-{next(_names)}")
    store(pg_session, [dict(r) for r in records], rollout.id)
    fold(pg_session, rollout_id=rollout.id, stage=0, policy=policy)
    # Read back from the stored state (its JSON), as the next gate run would.
    got = folded_stats(fold(pg_session, rollout_id=rollout.id, stage=0, policy=policy), policy)
    assert_same_stats(got, replayed, skip={FEEDBACK})
    assert set(got.control) == set(replayed.control)
    for key, cell in replayed.control.items():
        assert as_floats(got.control[key]) == pytest.approx(as_floats(cell), rel=RTOL, abs=1e-9)
    exported = list(pair_records(pg_session, rollout_id=rollout.id))
    want = replay(exported, policy, every=len(exported)).verdict
    assert_same_verdict(compute(pg_session, rollout=rollout, policy=policy), want, skip={FEEDBACK})


def test_answer_statistics_too_small_to_square_fold_as_zero(pg_session):
    # A mean log-prob of -5e-324 (hypothesis found it): squared in Postgres's float8 it
    # underflowed and the fold raised; below 1e-50 a statistic is 0 on both paths.
    side = {"ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 1.0, "status": "ok", "evals": {"task": True},
            "draft_tokens": 0, "accepted_tokens": 0}  # fmt: skip
    raw = []
    for k in range(60):
        mean = -1e-200 * (k + 1)  # the candidate's -5e-324: differences near 1e-200
        sampled = {**side, "temperature": 0.8, "top_p": 1.0, "max_tokens": 64, "seed": None,
                   "finish_reason": "stop", "output_tokens": 10, "logprob_tokens": 10,
                   "logprob_sum": mean * 10, "distinct_2": 0.5}  # fmt: skip
        cand = {**sampled, "logprob_sum": -5e-324}
        raw.append({"segment": "chat", "baseline": dict(sampled), "candidate": cand,
                    "lag_s": 0, "control": 1, "id_rank": k})  # fmt: skip
    records = as_records(raw, episodes=False)
    rollout = factories.rollout(pg_session, name=f"tiny-{next(_names)}")
    store(pg_session, [dict(r) for r in records], rollout.id)
    fold(pg_session, rollout_id=rollout.id, stage=0, policy=PARITY_POLICY)
    exported = list(pair_records(pg_session, rollout_id=rollout.id))
    want = replay(exported, PARITY_POLICY, every=len(exported)).verdict
    got = compute(pg_session, rollout=rollout, policy=PARITY_POLICY)
    assert_same_verdict(got, want, skip={FEEDBACK})


@pytest.mark.parametrize("episodes", [False, True])
def test_looping_pairs_are_read_alike_by_replay_and_the_fold(pg_session, episodes):
    # The repetition-loop signature (issue 40) from the generations' token counts and
    # distinct-2: looping, healthy, unreadable (no drafts, counts that cannot be) pairs.
    rng = np.random.default_rng(40)
    ok = {"ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 2.0, "status": "ok", "evals": {"task": True}}
    kinds = {
        "loops": {"output_tokens": 117, "draft_tokens": 104, "accepted_tokens": 104},
        "healthy": {"output_tokens": 120, "draft_tokens": 80, "accepted_tokens": 60},
        "no_drafts": {"output_tokens": 120, "draft_tokens": 0, "accepted_tokens": 0},
        "impossible": {"output_tokens": 50, "draft_tokens": 80, "accepted_tokens": 60},
        # The baseline's answer collapsed against the candidate's: the baseline side.
        "baseline_loops": {"output_tokens": 120, "draft_tokens": 80, "accepted_tokens": 60},
    }
    raw = []
    kind = "healthy"
    for i in range(240):
        # With episodes, an episode's pairs share their kind (e.g. a conversation that
        # loops), so the clustered interval, from the episode sums, is the binding one.
        if not episodes or i % 6 == 0:
            p = [0.2, 0.45, 0.1, 0.1, 0.15] if episodes else [0.25, 0.5, 0.1, 0.1, 0.05]
            kind = rng.choice(list(kinds), p=p)
        d2 = 0.2 if kind == "loops" else float(rng.uniform(0.8, 0.95))
        b_d2 = 0.3 if kind == "baseline_loops" else 0.9
        raw.append({
            "segment": "code" if i % 2 else "chat", "lag_s": 1, "control": 5, "id_rank": i,
            "episode": f"e{i // 6}" if episodes else None,
            "baseline": {**ok, "tpot_s": 0.02 + rng.uniform(0, 0.002), "output_tokens": 120,
                         "draft_tokens": 0, "accepted_tokens": 0, "distinct_2": b_d2},
            "candidate": {**ok, **kinds[kind], "distinct_2": d2},
        })  # fmt: skip
    records = as_records(raw)
    want = replay(records, POLICY, every=len(records)).verdict
    rollout = factories.rollout(pg_session, name=f"loops-{next(_names)}")
    store(pg_session, [dict(r) for r in records], rollout.id)
    got = compute(pg_session, rollout=rollout, policy=POLICY)
    assert_same_verdict(got, want, skip={FEEDBACK})
    # The statistics themselves, episode sums too (an interval may not show them).
    cols = columns(fold_order(records), POLICY, RolloutMode.SHADOW)
    replayed = at_look(to_stats(cols, POLICY, np.array([len(records)])), 0)
    state = fold(pg_session, rollout_id=rollout.id, stage=0, policy=POLICY)
    assert_same_stats(folded_stats(state, POLICY), replayed, skip={FEEDBACK})
    loop = next(c for c in want.cells if c.metric == "loop" and c.segment == "all")
    assert 30 < loop.n < 220
    if not episodes:  # with episodes, the clustered interval is too wide for a kill here
        assert any(code.startswith("kill:loop") for code in want.reason_codes), want.reason_codes
