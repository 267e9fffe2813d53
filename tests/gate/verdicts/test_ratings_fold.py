"""The live thumbs-down cell folds ratings by rating id (`gate.verdicts.feedback`).

At every look the folded sums equal replay's over the pairs folded so far, while ratings
arrive in several looks: late ratings of folded pairs, a second rating of an answer (which
must not count), ratings of pairs not stamped yet (counted when their pair is folded),
episodes spanning looks and segments. A rating once folded stays, and a rating in flight
holds the look until it commits (rating ids are given at insert, not at commit).
"""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from gate.db.enums import RolloutMode
from gate.db.models import Feedback, Generation, Pair, RatedEpisode
from gate.feedback import service as feedback
from gate.pairs.export import pair_records
from gate.stats.cumulative import at_look, to_stats
from gate.stats.fold_stats import to_stats as folded_stats
from gate.stats.gate_stats import GateStats
from gate.stats.record_columns import columns, fold_order
from gate.verdicts.folds import feedback_sums, fold
from tests import factories
from tests.gate.stats.test_sql import store
from tests.gate.verdicts.paths_agree import POLICY, START, as_records, assert_same_stats

pytestmark = pytest.mark.postgres
_names = itertools.count()
SIDE = {"ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 1.0, "status": "ok", "evals": {"task": True},
        "draft_tokens": 0, "accepted_tokens": 0}  # fmt: skip


def _batch(rng: np.random.Generator, n: int, first: int) -> list[dict]:
    """`n` pairs evaluated after pair `first - 1`'s, in 6 episodes that span batches and
    segments (one undeclared), a third of the sides rated with their pair."""
    raw = []
    for i in range(first, first + n):
        sides = [{**SIDE, "feedback": int(rng.choice([-1, 0, 1])) if rng.random() < 0.3 else None}
                 for _ in range(2)]  # fmt: skip
        raw.append({"segment": ["chat", "code", "unlisted"][i % 3], "baseline": sides[0],
                    "candidate": sides[1], "lag_s": 0, "control": 1, "id_rank": 0,
                    "episode": f"ep{i % 6}" if i % 5 else None})  # fmt: skip
    records = as_records(raw)
    for k, record in enumerate(records):
        at = (START + timedelta(seconds=first + k)).isoformat()
        record["created_at"] = record["evaluated_at"] = at
    return records


def _replayed(session: Session, rollout_id: int) -> GateStats:
    exported = list(pair_records(session, rollout_id=rollout_id, evaluated_only=True))
    cols = columns(fold_order(exported), POLICY, RolloutMode.SHADOW)
    return at_look(to_stats(cols, POLICY, np.array([len(exported)])), 0)


def _look(session: Session, rollout_id: int) -> GateStats:
    state = fold(session, rollout_id=rollout_id, stage=0, policy=POLICY)
    rated = feedback_sums(session, rollout_id=rollout_id, stage=0, state=state, policy=POLICY)
    return folded_stats(state, POLICY, feedback=rated)


def _rate(session: Session, rollout_id: int, rng: np.random.Generator, share: float) -> None:
    """Rate a share of the rollout's stored answers (again, for those rated before)."""
    gens = session.execute(
        select(Generation.id, Generation.pair_id).where(Generation.rollout_id == rollout_id)
    ).all()
    rows = [{"generation_id": g, "pair_id": p, "thumbs": int(rng.choice([-1, 1]))}
            for g, p in gens if rng.random() < share]  # fmt: skip
    session.execute(insert(Feedback), rows)
    session.flush()


def test_ratings_folded_over_several_looks_equal_replay_at_each(pg_session):
    rng = np.random.default_rng(6)
    rollout_id = factories.rollout(pg_session, name=f"rated-{next(_names)}").id
    store(pg_session, _batch(rng, 40, 0), rollout_id)
    first = _look(pg_session, rollout_id)
    assert first.cells[("feedback", "all")].candidate.n > 0
    assert_same_stats(first, _replayed(pg_session, rollout_id))

    # Late ratings of folded pairs, second ratings of rated answers (they must not count),
    # new pairs with their ratings, and pairs rated before they are stamped.
    _rate(pg_session, rollout_id, rng, 0.4)
    store(pg_session, _batch(rng, 30, 40), rollout_id)
    unstamped = _batch(rng, 20, 70)
    store(pg_session, unstamped, rollout_id)
    ids = [uuid.UUID(r["pair_id"]) for r in unstamped]
    pg_session.execute(update(Pair).where(Pair.id.in_(ids)).values(evaluated_at=None))
    _rate(pg_session, rollout_id, rng, 0.3)
    second = _look(pg_session, rollout_id)
    assert_same_stats(second, _replayed(pg_session, rollout_id))

    # The pairs rated before their stamp are stamped now, after every pair folded.
    for k, pair_id in enumerate(ids):
        stamp = START + timedelta(seconds=100 + k)
        pg_session.execute(update(Pair).where(Pair.id == pair_id).values(evaluated_at=stamp))
    _rate(pg_session, rollout_id, rng, 0.2)
    third = _look(pg_session, rollout_id)
    want = _replayed(pg_session, rollout_id)
    assert_same_stats(third, want)
    assert third.n_pairs > second.n_pairs
    # Nothing new: the same sums.
    assert_same_stats(_look(pg_session, rollout_id), want)


def test_a_folded_rating_stays_when_its_row_is_gone(pg_session):
    # A look reads what is new, not the stage's ratings again: a folded rating counts
    # from then on (its factor once read stays), even if retention deleted its row.
    rng = np.random.default_rng(7)
    rollout_id = factories.rollout(pg_session, name=f"kept-{next(_names)}").id
    store(pg_session, _batch(rng, 40, 0), rollout_id)
    before = _look(pg_session, rollout_id).cells[("feedback", "all")]
    assert before.baseline.n + before.candidate.n > 0
    gens = select(Generation.id).where(Generation.rollout_id == rollout_id)
    pg_session.execute(delete(Feedback).where(Feedback.generation_id.in_(gens)))
    assert _look(pg_session, rollout_id).cells[("feedback", "all")] == before
    stored = select(func.count()).select_from(RatedEpisode)
    assert pg_session.scalar(stored.where(RatedEpisode.rollout_id == rollout_id)) > 0


def test_a_rating_in_flight_holds_the_look_until_it_commits(pg_committing: sessionmaker):
    # Ratings are folded by id and an id is given at insert: a rating inserted before a look
    # but committed after it would have an id below the look's and never be read.
    with pg_committing() as db, db.begin():
        rollout_id = factories.rollout(db, name="in-flight").id
        store(db, _batch(np.random.default_rng(8), 10, 0), rollout_id)
        pair_id = db.scalars(select(Pair.id).where(Pair.rollout_id == rollout_id)).first()
    rating = pg_committing()
    rating.begin()
    feedback.record(rating, response_id=None, pair_id=pair_id, thumbs=-1, score=None,
                    escalated=False, comment=None)  # fmt: skip
    blocked = False
    try:
        with pg_committing() as look, look.begin():
            # A deadline on the wait: the look waits for the rating's commit, not forever.
            look.execute(select(func.set_config("lock_timeout", "500ms", True)))
            with pytest.raises(OperationalError, match="lock timeout"):
                state = fold(look, rollout_id=rollout_id, stage=0, policy=POLICY)
                feedback_sums(look, rollout_id=rollout_id, stage=0, state=state, policy=POLICY)
            blocked = True
    finally:
        rating.rollback()
        rating.close()
    assert blocked
