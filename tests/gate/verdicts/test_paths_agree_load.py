"""Replay and the Postgres fold agree on load bands and, promoted by load, on the
load-matched pairs (`paths_agree`'s streams, each route's load scraped or not)."""

from __future__ import annotations

import itertools
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gate.db.enums import RolloutMode, RolloutState
from gate.db.models import EngineSample
from gate.pairs.export import pair_records
from gate.pairs.load import RUNNING
from gate.stats.cumulative import at_look, to_stats
from gate.stats.fold_stats import to_stats as folded_stats
from gate.stats.policy import load_tolerance
from gate.stats.policy_sections import Promotion
from gate.stats.record_columns import columns, fold_order
from gate.stats.replay import replay
from gate.stats.rule import FEEDBACK
from gate.verdicts.folds import fold
from gate.verdicts.service import compute
from tests import factories
from tests.gate.stats.test_sql import store
from tests.gate.verdicts.paths_agree import (
    POLICY,
    START,
    as_records,
    assert_same_bands,
    assert_same_stats,
    assert_same_verdict,
    ok_side,
    side,
)

pytestmark = pytest.mark.postgres
_names = itertools.count()

# Each route's load at the pair's start: one engine scrape right then, or none (pairs lie
# `SPACING` apart, past `max_gap_s`, so a missing scrape leaves the load unknown). Band
# edges (2, 4, 8, ...) are drawn often: a load on an edge falls in the band above.
load = st.one_of(
    st.none(), st.sampled_from([0.0, 1.0, 2.0, 4.0, 8.0, 64.0, 128.0]), st.floats(0, 300)
)
band_pair = st.fixed_dictionaries(
    {
        "segment": st.sampled_from(["chat", "code", "unlisted"]),
        "baseline": st.one_of(ok_side, ok_side, side, st.none()),
        "candidate": st.one_of(ok_side, ok_side, side),
        "lag_s": st.integers(0, 200),
        "control": st.integers(0, 9),
        "id_rank": st.integers(0, 2**32 - 1),
        "loads": st.tuples(load, load),
    }
)
SPACING = timedelta(seconds=40)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=st.lists(band_pair, min_size=1, max_size=60))
def test_the_fold_builds_the_load_bands_as_replay_does(pg_session, raw):
    rollout = factories.rollout(pg_session, name=f"bands-{next(_names)}")
    records = _with_loads(pg_session, rollout, raw)
    store(pg_session, [dict(r) for r in records], rollout.id)
    cols = columns(fold_order(records), POLICY, RolloutMode.SHADOW)
    replayed = at_look(to_stats(cols, POLICY, np.array([len(records)])), 0)
    state = fold(pg_session, rollout_id=rollout.id, stage=0, policy=POLICY)
    if not state.pairs:
        return
    # Read back from the stored state (its JSON), as the next gate run would.
    state = fold(pg_session, rollout_id=rollout.id, stage=0, policy=POLICY)
    assert_same_bands(folded_stats(state, POLICY).bands, replayed.bands)
    got = compute(pg_session, rollout=rollout, policy=POLICY)
    want = replay(records, POLICY, every=len(records)).verdict
    assert_same_verdict(got, want, skip={FEEDBACK})
    # The export carries the stamped loads: its replay judges as the fold does.
    exported = list(pair_records(pg_session, rollout_id=rollout.id))
    assert [[(s or {}).get("load") for s in (e["baseline"], e["candidate"])] for e in exported] == [
        [(s or {}).get("load") for s in (r["baseline"], r["candidate"])]
        for r in fold_order(records)
    ]
    again = replay(exported, POLICY, every=len(exported)).verdict
    assert_same_verdict(got, again, skip={FEEDBACK})


# Promoted and routed by load: loads near each other (within the tolerance of 1 or not),
# unknown, or on the tolerance's edge, so pairs are load-matched or not either way.
near = st.one_of(st.none(), st.sampled_from([0.0, 1.0, 2.0, 3.0, 2.5]), st.floats(0, 6))
BY_LOAD = POLICY.model_copy(update={"promotion": Promotion(route_by_load=True)})


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    raw=st.lists(
        st.tuples(band_pair, st.tuples(near, near)).map(lambda t: {**t[0], "loads": t[1]}),
        min_size=1,
        max_size=60,
    )
)
def test_promoted_by_load_the_fold_and_replay_judge_the_same_load_matched_pairs(pg_session, raw):
    policy, tolerance = BY_LOAD, load_tolerance(BY_LOAD, promoted=True)
    rollout = factories.rollout(pg_session, name=f"matched-{next(_names)}")
    rollout.state = RolloutState.PROMOTED
    records = _with_loads(pg_session, rollout, raw)
    store(pg_session, [dict(r) for r in records], rollout.id)
    cols = columns(fold_order(records), policy, RolloutMode.SHADOW)
    looks = np.array([len(records)])
    replayed = at_look(to_stats(cols, policy, looks, load_match=tolerance), 0)
    everything = at_look(to_stats(cols, policy, looks), 0)
    assert replayed.n_pairs + replayed.n_unmatched == everything.n_pairs
    state = fold(pg_session, rollout_id=rollout.id, stage=0, policy=policy, load_match=tolerance)
    if not state.pairs:
        return
    state = fold(pg_session, rollout_id=rollout.id, stage=0, policy=policy, load_match=tolerance)
    assert_same_stats(folded_stats(state, policy), replayed, skip={FEEDBACK})
    got = compute(pg_session, rollout=rollout, policy=policy)
    want = replay(records, policy, every=len(records), load_match=tolerance).verdict
    assert_same_verdict(got, want, skip={FEEDBACK})
    exported = list(pair_records(pg_session, rollout_id=rollout.id))
    again = replay(exported, policy, every=len(exported), load_match=tolerance).verdict
    assert_same_verdict(got, again, skip={FEEDBACK})


def _with_loads(pg_session, rollout, raw: list[dict]) -> list[dict]:
    """Records `SPACING` apart, each route's load scraped at the pair's start (or not)."""
    records: list[dict] = []
    routes = (rollout.baseline_route_id, rollout.candidate_route_id)
    for r, record in zip(raw, as_records(raw), strict=True):
        at = START + SPACING * len(records)
        for name, route, value in zip(("baseline", "candidate"), routes, r["loads"], strict=True):
            if record[name] is not None:
                record[name] = {**record[name], "load": value}
            if value is not None:
                sample = EngineSample(
                    route_id=route, metric=RUNNING, labels={}, value=value, scraped_at=at
                )
                pg_session.add(sample)
        evaluated = at + timedelta(seconds=r["lag_s"])
        records.append(
            {**record, "created_at": at.isoformat(), "evaluated_at": evaluated.isoformat()}
        )
    pg_session.flush()  # the scrapes exist when the pairs are stamped
    return records
