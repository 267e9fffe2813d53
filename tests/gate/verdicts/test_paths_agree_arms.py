"""Replay, simulation and the Postgres fold agree per arm (issue 40; `test_paths_agree`'s
pair streams split over arms).

A stage of three arms on random pair streams: control pairs (no arm, in every arm's
stream), an arm added mid-stage, two looks. Per arm, the replay path (the arm's member
records -> columns -> statistics), the simulation path (a leading runs axis) and the arm's
fold state give the same statistics; the periodic gate's choice from the folds equals the
choice by replay (decision, winner, leader, every arm's state, pairs, interval, acceptance
length), and no pair is replayed on Postgres.
"""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy import select, text, update

from gate.db.enums import ArmState, RolloutMode
from gate.db.models import GateFold, Pair
from gate.rollouts import arms as rollout_arms
from gate.rollouts import service
from gate.rollouts.schemas import ArmIn, RolloutIn, RouteIn
from gate.rollouts.states import Action
from gate.stats import fold_stats
from gate.stats.arms import arm_policy, arm_rows
from gate.stats.cumulative import at_look, to_stats
from gate.stats.policy import at_stage, next_stage_share
from gate.stats.record_columns import columns, fold_order
from gate.verdicts import arms as armgate
from gate.verdicts import folds
from gate.verdicts.service import compute, run_gate
from gate.verdicts.slices import SLICE_PAIRS, Slice, stage_since
from tests import factories
from tests.gate.stats.test_sql import store
from tests.gate.verdicts.paths_agree import (
    POLICY,
    RTOL,
    _run,
    as_records,
    assert_same_stats,
    assert_same_verdict,
    pair,
    stacked,
)

pytestmark = pytest.mark.postgres
_names = itertools.count()
JUDGED = arm_policy(at_stage(POLICY, 0))
SHARE = next_stage_share(POLICY, 0, RolloutMode.SHADOW)
LATER = timedelta(minutes=5)  # past the strategy's largest lag between creation and stamp


def armed(session, names: list[str], later: list[str]):
    """A running rollout with arms `names`, and candidate routes ready for `later` arms."""
    n = next(_names)
    routes = [("plain", "baseline"), *[(a, "candidate") for a in names + later]]
    for name, role in routes:
        spec = RouteIn(name=f"{name}-{n}", base_url="http://127.0.0.1:9/v1", model="m", role=role)
        service.create_route(session, spec=spec, actor="t")
    spec = RolloutIn(
        name=f"arms-{n}",
        alias=f"arms-{n}",
        baseline_route=f"plain-{n}",
        arms=[ArmIn(name=a, route=f"{a}-{n}") for a in names],
        policy=POLICY.model_dump(mode="json"),
    )
    rollout = service.create_rollout(session, spec=spec, actor="t")
    service.transition(session, rollout_id=rollout.id, action=Action.START, actor="t", reason="t")
    return rollout, n


def with_arms(raw: list[tuple[dict, str]], later: str) -> list[dict]:
    """Records naming their arm (control pairs none); arm `later` only from halfway on.

    The second half is stamped after the first (as the watermark's stamps are): its times
    move past every first-half `evaluated_at`."""
    records = as_records([r for r, _ in raw])
    half = len(raw) // 2
    for i, (record, (_, arm)) in enumerate(zip(records, raw, strict=True)):
        if arm == later and i < half:
            arm = "a" if i % 2 else "b"
        record["arm"] = None if record["is_control"] else arm
        if i >= half:
            for key in ("created_at", "evaluated_at"):
                moved = datetime.fromisoformat(record[key]) + LATER
                record[key] = moved.isoformat()
    return records


def by_replay(session, rollout) -> tuple[Any, dict]:
    """The rollout's verdict and choice through the replay path (as on SQLite)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(folds, "in_sql", lambda *_, **__: False)
        return armgate.judge(session, rollout=rollout, policy=POLICY)


def refusing_replay(*_: object, **__: object) -> None:
    raise AssertionError("the arms' verdict replayed the stage's pairs on Postgres")


def assert_same_json(got: Any, want: Any, where: str = "") -> None:
    if isinstance(want, float) and isinstance(got, float):
        assert math.isclose(got, want, rel_tol=RTOL, abs_tol=1e-9), where
    elif isinstance(want, dict):
        assert set(got) == set(want), where
        for key in want:
            assert_same_json(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_same_json(a, b, f"{where}[{i}]")
    else:
        assert got == want, where


def assert_arm_paths_agree(session, rollout, records: list[dict], name: str) -> None:
    """One arm's statistics: replay and simulation of its member records, and its fold."""
    rows = arm_rows(fold_order(records), name)
    state, _ = folds.fold_arm(
        session, rollout_id=rollout.id, stage=0, arm=name, policy=POLICY, load_match=None
    )
    assert state.pairs == len(rows)
    if not rows:
        return
    cols = columns(rows, JUDGED, RolloutMode.SHADOW)
    looks = np.array([len(rows)])
    replayed = at_look(to_stats(cols, JUDGED, looks, next_share=SHARE), 0)
    simulated = _run(at_look(to_stats(stacked(cols), JUDGED, looks, next_share=SHARE), 0), 0)
    assert_same_stats(simulated, replayed)
    # Each arm's ratings are read beside its fold (`folds.feedback_sums`, as `arms` does).
    rated = folds.feedback_sums(session, rollout_id=rollout.id, stage=0, state=state,
                                policy=POLICY, arm=name)  # fmt: skip
    folded = fold_stats.to_stats(state, JUDGED, next_share=SHARE, feedback=rated)
    assert_same_stats(folded, replayed)


def assert_look_agrees(session, rollout, records: list[dict]) -> None:
    """The gate's look from the folds equals the look by replay, arm by arm and overall."""
    session.expire(rollout)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(armgate, "replay_arms", refusing_replay)
        folded, choice = armgate.judge(session, rollout=rollout, policy=POLICY)
        assert compute(session, rollout=rollout, policy=POLICY).decision is folded.decision
    replayed, want = by_replay(session, rollout)
    assert_same_verdict(folded, replayed)
    assert folded.summary == replayed.summary
    assert_same_json(choice, want)
    for arm in rollout.arms:
        assert_arm_paths_agree(session, rollout, records, arm.name)


arm_pair = st.tuples(pair.filter(lambda p: p["baseline"] or p["candidate"]),
                     st.sampled_from(["a", "b", "c"]))  # fmt: skip


# No shrinking: each example builds a rollout and two looks in Postgres, so shrinking a
# failure takes many minutes; the failing example is reported as generated.
@settings(
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=st.lists(arm_pair, min_size=2, max_size=80))
def test_replay_simulation_and_the_fold_agree_per_arm(pg_session, raw):
    rollout, n = armed(pg_session, ["a", "b"], later=["c"])
    records = with_arms(raw, later="c")
    half = len(records) // 2
    store(pg_session, records[:half], rollout.id)
    assert_look_agrees(pg_session, rollout, records[:half])
    spec = ArmIn(name="c", route=f"c-{n}")
    rollout_arms.add_arm(pg_session, rollout_id=rollout.id, spec=spec, actor="t", reason="t")
    store(pg_session, records[half:], rollout.id)
    assert_look_agrees(pg_session, rollout, records)


def test_each_arm_is_folded_once_and_the_verdict_replays_nothing(pg_session, monkeypatch):
    db = pg_session
    rollout, _ = armed(db, ["fast", "slow", "idle"], later=[])
    factories.seed_pairs(db, rollout.id, 300, tpot_ratio=0.7, arm="fast", seed=1)
    factories.seed_pairs(db, rollout.id, 200, tpot_ratio=0.95, arm="slow", seed=2)
    factories.seed_pairs(db, rollout.id, 40, arm=None, seed=3)
    # The pairs that name no arm: the baseline against itself, in every arm's stream.
    db.execute(update(Pair).where(Pair.arm.is_(None)).values(is_control=True))
    monkeypatch.setattr(armgate, "replay_arms", refusing_replay)
    verdict = run_gate(db, rollout_id=rollout.id, publisher=None)
    stored = {
        f.arm: f for f in db.scalars(select(GateFold).where(GateFold.rollout_id == rollout.id))
    }
    # One state per arm with pairs, over its own pairs and the 40 control pairs.
    assert {arm: f.pairs for arm, f in stored.items()} == {"fast": 340, "slow": 240, "idle": 40}
    assert {a["arm"]: a["pairs"] for a in verdict.arms["arms"]} == {
        "fast": 340,
        "slow": 240,
        "idle": 40,
    }
    # The arm's sums (first pair, acceptance length) are folded up to the same pair.
    assert stored["fast"].arm_sums["upto"][1] == str(stored["fast"].watermark_id)
    # The next look folds only the new pairs into the arm's stored state.
    mark = stored["slow"].watermark_id
    folded = set(db.scalars(select(Pair.id)))
    factories.seed_pairs(db, rollout.id, 10, tpot_ratio=0.95, arm="slow", seed=4)
    # Stamped after the last look, as the watermark's stamps are.
    stamped = datetime.now(UTC) - timedelta(seconds=1)
    db.execute(update(Pair).where(Pair.id.not_in(folded)).values(evaluated_at=stamped))
    run_gate(db, rollout_id=rollout.id, publisher=None)
    db.refresh(stored["slow"])
    db.refresh(stored["fast"])
    assert (stored["slow"].pairs, stored["fast"].pairs) == (250, 340)
    assert stored["slow"].watermark_id != mark
    assert all(a.state is ArmState.ACTIVE for a in rollout.arms)


def test_an_arm_refolded_from_scratch_starts_its_sums_over(pg_session):
    # A stored state of another policy or FOLD_VERSION refolds from scratch; the arm's sums
    # (first pair, acceptance length) are stored with it and must start over too, not be
    # carried on as the earlier fold left them (review2).
    db = pg_session
    rollout, _ = armed(db, ["a", "b"], later=[])
    factories.seed_pairs(db, rollout.id, 30, arm="a", seed=1)
    factories.seed_pairs(db, rollout.id, 30, arm="b", seed=2)
    _, want = folds.fold_arm(db, rollout_id=rollout.id, stage=0, arm="a", policy=POLICY)
    row = db.scalars(
        select(GateFold).where(GateFold.rollout_id == rollout.id, GateFold.arm == "a")
    ).one()
    stale = {**row.arm_sums, "acceptance": {**row.arm_sums["acceptance"], "requests": 999}}
    row.policy_key, row.arm_sums = "stored by an earlier FOLD_VERSION", stale
    db.flush()
    state, got = folds.fold_arm(db, rollout_id=rollout.id, stage=0, arm="a", policy=POLICY)
    assert state.pairs == 30
    assert got == want


def test_a_conversation_moved_to_an_added_arm_opens_nothing_there(pg_session):
    # Episodes are sticky to an arm until the arm set changes: arm c added mid-stage takes
    # conversations already open in a and b (`choose_arm`). Their next turns in c are no
    # first turns (issue 39: a warm-up of later turns sets the collapse level too high, and
    # true first turns then sit below it); on every path (the fold's `opens`, replay of
    # the arm's records) an episode's first pair is its first in the stage, any arm.
    rollout, n = armed(pg_session, ["a", "b"], later=["c"])
    side = {"ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 1.0, "status": "ok",
            "evals": {"task": True}, "draft_tokens": 100, "accepted_tokens": 90}  # fmt: skip
    raw = [({"segment": "chat", "baseline": {**side, "draft_tokens": 0}, "candidate": side,
             "lag_s": 0, "control": 1, "id_rank": 0, "episode": f"e{i % 6}"},
            "c" if i >= 12 else "ab"[i % 2]) for i in range(24)]  # fmt: skip
    records = with_arms(raw, later="none")
    store(pg_session, records[:12], rollout.id)
    spec = ArmIn(name="c", route=f"c-{n}")
    rollout_arms.add_arm(pg_session, rollout_id=rollout.id, spec=spec, actor="t", reason="t")
    store(pg_session, records[12:], rollout.id)
    last = pg_session.execute(
        select(Pair.evaluated_at, Pair.id).where(Pair.rollout_id == rollout.id)
        .order_by(Pair.evaluated_at.desc(), Pair.id.desc()).limit(1)
    ).one()  # fmt: skip
    piece = Slice(rollout.id, 0, after=None, upto=tuple(last), arm="c",
                  since=stage_since(pg_session, rollout_id=rollout.id, stage=0))  # fmt: skip
    opens = pg_session.execute(text(SLICE_PAIRS), piece.params(POLICY)).mappings().all()
    assert len(opens) == 12 and not any(row["opens"] for row in opens)
    # Replay: the arm's records say so (`arm_rows`), so its columns read no first pair.
    rows = arm_rows(fold_order(records), "c")
    assert len(rows) == 12 and all(row["episode_continues"] for row in rows)
    assert_look_agrees(pg_session, rollout, records)
