"""Replay, simulation and the Postgres fold agree on random pair streams (hypothesis).

The streams (`paths_agree`): both modes, declared and undeclared segments, control pairs,
missing sides, every side status, evaluators passing, failing or not evaluable, greedy
pairs, acceptance, per-token exactness sums, sampled sides, episodes. For every guardrail
of the registry the replay path (records -> columns -> statistics), the simulation path
(the same columns with a leading runs axis, as `simulate` holds them) and, in shadow mode,
the Postgres fold give the same statistics, collapse detectors, decision, reason codes and
per-cell estimates and intervals, to 1e-9 relative. Sampled-output parity and loops are in
`test_paths_agree_parity.py`, load bands in `test_paths_agree_load.py`, arms in
`test_paths_agree_arms.py`.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import insert, select

from gate.db.enums import RolloutMode
from gate.db.models import Feedback, Generation
from gate.pairs.export import pair_records
from gate.reports.headline.summary import headline
from gate.stats.cumulative import at_look, to_stats
from gate.stats.fold_stats import to_stats as folded_stats
from gate.stats.record_columns import columns, fold_order
from gate.stats.replay import replay
from gate.stats.rule import FEEDBACK
from gate.stats.verdict import decide
from gate.verdicts.folds import feedback_sums, fold
from gate.verdicts.service import compute, run_gate
from tests import factories
from tests.gate.stats.test_sql import store
from tests.gate.verdicts.paths_agree import (
    POLICY,
    _run,
    as_records,
    assert_same_stats,
    assert_same_verdict,
    pair,
    stacked,
)

pytestmark = pytest.mark.postgres
_names = itertools.count()


def canary(records: list[dict], seed: int) -> list[dict]:
    """Each pair served by one cohort (the other side removed), control pairs none."""
    rng = np.random.default_rng(seed)
    out = []
    for r in records:
        keep = "candidate" if rng.random() < 0.5 else "baseline"
        other = "baseline" if keep == "candidate" else "candidate"
        out.append({**r, "is_control": False, other: None})
    return out


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    raw=st.lists(pair.filter(lambda p: p["baseline"] or p["candidate"]), min_size=1, max_size=60),
    mode=st.sampled_from(list(RolloutMode)),
    episodes=st.booleans(),
)
def test_replay_simulation_and_the_fold_agree_on_every_guardrail(pg_session, raw, mode, episodes):
    records = as_records(raw, episodes)
    if mode is RolloutMode.CANARY:
        records = canary(records, len(raw))
    ordered = fold_order(records)
    cols = columns(ordered, POLICY, mode)
    looks = np.array([len(records)])
    replayed = at_look(to_stats(cols, POLICY, looks, mode=mode), 0)
    simulated = at_look(to_stats(stacked(cols), POLICY, looks, mode=mode), 0)
    first = _run(simulated, 0)
    assert_same_stats(first, replayed)
    want = decide(POLICY, replayed)
    assert_same_verdict(decide(POLICY, first), want)
    assert_same_verdict(replay(records, POLICY, every=len(records), mode=mode).verdict, want)
    if mode is RolloutMode.SHADOW:
        rollout = factories.rollout(pg_session, name=f"prop-{next(_names)}")
        store(pg_session, [dict(r) for r in records], rollout.id)
        state = fold(pg_session, rollout_id=rollout.id, stage=0, policy=POLICY)
        if state.pairs:
            # Ratings are read beside the fold at each look (`feedback_sums`). With episodes
            # the fold keeps each cell's episode sums (issue 39).
            rated = feedback_sums(pg_session, rollout_id=rollout.id, stage=0, state=state,
                                  policy=POLICY)  # fmt: skip
            assert_same_stats(folded_stats(state, POLICY, feedback=rated), replayed)
            assert (folded_stats(state, POLICY).n_episodes is None) is (replayed.n_episodes is None)
            got = compute(pg_session, rollout=rollout, policy=POLICY)
            assert_same_verdict(got, want)
            exported = list(pair_records(pg_session, rollout_id=rollout.id))
            again = replay(exported, POLICY, every=len(exported)).verdict
            assert_same_verdict(got, again)


def test_an_evaluator_never_evaluable_yet_is_seen_alike_by_replay_and_the_fold(pg_session):
    # Every `task` result so far is not evaluable: the fold sees the evaluator (its result
    # rows exist) and so must replay, or the two split alpha_kill over different slots.
    ok = {"ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 2.0, "status": "ok",
          "draft_tokens": 10, "accepted_tokens": 5}  # fmt: skip
    raw = [
        {"segment": "chat", "lag_s": 1, "control": 5, "id_rank": i,
         "baseline": {**ok, "tpot_s": 0.02 + i / 1000, "evals": {"task": None, "schema": True}},
         "candidate": {**ok, "evals": {"task": None, "schema": i % 7 != 0}}}
        for i in range(30)
    ]  # fmt: skip
    records = as_records(raw)
    want = replay(records, POLICY, every=len(records)).verdict
    rollout = factories.rollout(pg_session, name=f"never-{next(_names)}")
    store(pg_session, [dict(r) for r in records], rollout.id)
    got = compute(pg_session, rollout=rollout, policy=POLICY)
    assert_same_verdict(got, want, skip={FEEDBACK})
    assert {c.metric for c in want.cells} >= {"eval:task", "eval:schema"}


def test_a_stage_with_episodes_is_judged_with_the_episode_as_the_unit(pg_session):
    # 30 episodes of 4 pairs, each episode's TPOT ratio its own: the fold keeps episode
    # sums (issue 39), so its interval is as wide as replay's, not that of independent pairs.
    rng = np.random.default_rng(39)
    raw = []
    for e in range(30):
        shift = float(np.exp(rng.normal(0.0, 0.3)))
        for _ in range(4):
            side = {"ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 1.0, "status": "ok",
                    "evals": {"task": True}, "draft_tokens": 0, "accepted_tokens": 0}  # fmt: skip
            cand = {**side, "tpot_s": 0.02 * shift * float(np.exp(rng.normal(0.0, 0.05)))}
            raw.append({"segment": "chat", "baseline": side, "candidate": cand, "lag_s": 0,
                        "control": 1, "id_rank": 0, "episode": f"ep{e}"})  # fmt: skip
    records = as_records(raw)
    rollout = factories.rollout(pg_session, name=f"episodes-{next(_names)}")
    store(pg_session, [dict(r) for r in records], rollout.id)
    got = compute(pg_session, rollout=rollout, policy=POLICY)
    exported = list(pair_records(pg_session, rollout_id=rollout.id))
    assert {r["episode"] for r in exported} == {f"ep{e}" for e in range(30)}
    assert_same_verdict(got, replay(exported, POLICY, every=len(exported)).verdict, {FEEDBACK})
    assert got.n_episodes == 29  # ep0's four pairs fall in the warm-up
    # The stored verdict and its headline carry the episodes beside the pairs.
    rollout.policy = POLICY.model_dump(mode="json")  # what the periodic gate reads
    stored = run_gate(pg_session, rollout_id=rollout.id, publisher=None)
    assert (stored.n_pairs, stored.episodes) == (got.n_pairs, 29)
    assert headline(stored, policy=POLICY).episodes == 29
    alone = replay([{**r, "episode": None} for r in exported], POLICY, every=len(exported))
    (mine,) = [c for c in got.cells if (c.metric, c.segment) == ("tpot", "all")]
    (theirs,) = [c for c in alone.verdict.cells if (c.metric, c.segment) == ("tpot", "all")]
    assert mine.upper - mine.lower > 1.5 * (theirs.upper - theirs.lower)


@pytest.mark.parametrize("episodes", [False, True])
def test_thumbs_down_on_the_candidate_kills_the_live_shadow_gate_as_replay(pg_session, episodes):
    # Users (or raters) mark a third of the candidate's answers down, none of the
    # baseline's: the live gate folds the ratings (issue 39's feedback cell) and kills for
    # them, with replay's statistics and verdict.
    rng = np.random.default_rng(7)
    raw = []
    for i in range(400):
        side = {"ttft_s": 0.2, "tpot_s": 0.02 * float(np.exp(rng.normal(0, 0.05))),
                "e2e_s": 1.0, "status": "ok", "evals": {"task": True}, "draft_tokens": 0,
                "accepted_tokens": 0}  # fmt: skip
        cand = {**side, "feedback": -1 if rng.random() < 0.35 else 1}
        raw.append({"segment": "chat", "baseline": {**side, "feedback": 0 if i % 2 else None},
                    "candidate": cand, "lag_s": 0, "control": 1, "id_rank": 0,
                    "episode": f"conv-{i // 2}"})  # fmt: skip
    records = as_records(raw, episodes)
    rollout = factories.rollout(pg_session, name=f"thumbs-{next(_names)}")
    store(pg_session, [dict(r) for r in records], rollout.id)
    got = compute(pg_session, rollout=rollout, policy=POLICY)
    exported = list(pair_records(pg_session, rollout_id=rollout.id))
    want = replay(exported, POLICY, every=len(exported)).verdict
    assert_same_verdict(got, want)
    assert any(code.startswith("kill:feedback") for code in got.reason_codes), got.reason_codes
    state = fold(pg_session, rollout_id=rollout.id, stage=0, policy=POLICY)
    cols = columns(fold_order(exported), POLICY, RolloutMode.SHADOW)
    replayed = at_look(to_stats(cols, POLICY, np.array([len(exported)])), 0)
    rated = feedback_sums(pg_session, rollout_id=rollout.id, stage=0, state=state, policy=POLICY)
    assert_same_stats(folded_stats(state, POLICY, feedback=rated), replayed)


def test_a_rating_once_read_never_changes_at_a_later_look(pg_session):
    # The thumbs-down cell's bets multiply one factor per rated answer: a factor replaced
    # between looks (a rating changed from up to down) is not a step of a supermartingale,
    # and Ville's bound no longer holds. An answer's first rating with thumbs is its
    # outcome on every path (live read, export, replay): a later one changes nothing.
    side = {"ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 1.0, "status": "ok", "evals": {"task": True},
            "draft_tokens": 0, "accepted_tokens": 0}  # fmt: skip
    raw = [{"segment": "chat", "baseline": {**side, "feedback": 1 if i % 3 else -1},
            "candidate": {**side, "feedback": 1}, "lag_s": 0, "control": 1, "id_rank": 0,
            "episode": None} for i in range(40)]  # fmt: skip
    rollout = factories.rollout(pg_session, name=f"rerated-{next(_names)}")
    store(pg_session, [dict(r) for r in as_records(raw)], rollout.id)
    state = fold(pg_session, rollout_id=rollout.id, stage=0, policy=POLICY)

    def read() -> tuple:
        got = feedback_sums(pg_session, rollout_id=rollout.id, stage=0, state=state, policy=POLICY)
        return got["all"].counts

    before = read()
    assert before.candidate.k == 0 and before.candidate.n > 0
    # Every candidate answer rated up is rated again, down, after the look.
    gids = pg_session.execute(
        select(Feedback.generation_id, Feedback.pair_id)
        .join(Generation, Generation.id == Feedback.generation_id)
        .where(Generation.rollout_id == rollout.id, Generation.cohort == "candidate")
    ).all()
    pg_session.execute(
        insert(Feedback), [{"generation_id": g, "pair_id": p, "thumbs": -1} for g, p in gids]
    )
    pg_session.flush()
    assert read() == before
    exported = list(pair_records(pg_session, rollout_id=rollout.id))
    assert all(r["candidate"]["feedback"] == 1 for r in exported)
    cols = columns(fold_order(exported), POLICY, RolloutMode.SHADOW)
    replayed = at_look(to_stats(cols, POLICY, np.array([len(exported)])), 0)
    rated = feedback_sums(pg_session, rollout_id=rollout.id, stage=0, state=state, policy=POLICY)
    assert_same_stats(folded_stats(state, POLICY, feedback=rated), replayed)
