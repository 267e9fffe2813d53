"""On Postgres, each pair's load (the engine gauge at its start) is stamped with the pair;
`pairs export` carries it, and the gate folds the bands in SQL (no replay of the stage)
and judges as replay does."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gate.db.enums import Decision
from gate.db.models import EngineSample, Rollout
from gate.pairs.export import pair_records
from gate.pairs.load import RUNNING
from gate.reports import glance, render
from gate.reports.guardrails import band_row
from gate.reports.model import Week
from gate.reports.weekly import compute_weekly
from gate.stats.replay import replay
from gate.stats.simulated_pairs import draw_pairs, to_records
from gate.verdicts import service
from gate.verdicts.service import compute, run_gate
from tests import factories
from tests.gate.stats.test_load_bands import POLICY, QUARTER
from tests.gate.stats.test_sql import store

pytestmark = pytest.mark.postgres
START = datetime(2025, 6, 1, tzinfo=UTC)


def test_export_carries_the_loads_and_the_gate_holds_as_replay_does(pg_session, monkeypatch):
    cols = draw_pairs(QUARTER, POLICY, 1, np.random.default_rng(4))
    records = []
    for i, r in enumerate(to_records(cols, POLICY)):
        at = (START + timedelta(seconds=i)).isoformat()
        for side in ("baseline", "candidate"):  # `store` needs an evaluation per side
            r[side]["evals"] = {"task": True}
        records.append({**r, "created_at": at, "evaluated_at": at})
    rollout = factories.rollout(pg_session, name="load-bands-pg", policy=POLICY.model_dump())
    assert isinstance(rollout, Rollout)
    for i, r in enumerate(records):  # one scrape of each engine at each pair's start
        for route, side in (
            (rollout.baseline_route_id, "baseline"),
            (rollout.candidate_route_id, "candidate"),
        ):
            pg_session.add(
                EngineSample(
                    route_id=route, metric=RUNNING, labels={}, value=r[side]["load"],
                    scraped_at=START + timedelta(seconds=i),
                )
            )  # fmt: skip
    pg_session.flush()
    store(pg_session, records, rollout.id)  # stamps each pair's loads: the scrapes exist
    exported = list(pair_records(pg_session, rollout_id=rollout.id, evaluated_only=True))
    assert [(e["baseline"]["load"], e["candidate"]["load"]) for e in exported] == [
        (r["baseline"]["load"], r["candidate"]["load"]) for r in records
    ]
    want = replay(records, POLICY, every=len(records)).verdict
    # The fold alone judges: the stage's records are never replayed for the bands.
    monkeypatch.setattr(service, "pair_records", _no_replay)
    got = compute(pg_session, rollout=rollout, policy=POLICY)
    assert want.decision is Decision.HOLD
    assert (got.decision, got.reason_codes) == (want.decision, want.reason_codes)
    # Summed in SQL, in another order than replay's: equal up to rounding.
    assert [_split(b) for b in got.bands] == [_split(b, approx=True) for b in want.bands]
    # Stored with the verdict, shown by the weekly report and /ui's glance.
    stored = run_gate(pg_session, rollout_id=rollout.id, publisher=None)
    assert stored.bands == got.band_rows() and stored.bands
    year, number, _ = datetime.now(UTC).isocalendar()
    week = next(
        w for w in compute_weekly(pg_session, Week(year, number)).rollouts
        if w.rollout_id == rollout.id
    )  # fmt: skip
    assert week.bands == [band_row(b) for b in stored.bands]
    proven = next(row for row in week.bands if row[-1] == "yes")
    assert float(proven[2].split()[0]) == pytest.approx(1.25, abs=0.08)  # 20 % less TPOT
    text = render.markdown(compute_weekly(pg_session, Week(year, number)))
    assert "### Speedup per load band of the candidate" in text
    assert f"| {proven[0]} | {proven[1]} | {proven[2]} |" in text
    assert glance.latest(pg_session, rollout=rollout).bands == week.bands


def _no_replay(*args, **kwargs):
    raise AssertionError("a Postgres shadow verdict replayed the stage's pair records")


def _split(band, *, approx: bool = False) -> tuple:
    """A band's numbers (approximately, when asked) and its other fields."""
    fields = asdict(band)
    numbers = {k: v for k, v in fields.items() if isinstance(v, float)}
    rest = {k: v for k, v in fields.items() if k not in numbers}
    return (pytest.approx(numbers, rel=1e-9) if approx else numbers), rest
