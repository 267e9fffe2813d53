"""A toy guardrail declared once is seen by the fold, the verdict, the weekly report and /ui."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from fastapi.testclient import TestClient

from gate.db.enums import RolloutMode
from gate.reports import glance, render
from gate.reports.model import Week
from gate.reports.weekly import compute_weekly
from gate.stats.cumulative import at_look, to_stats
from gate.stats.fold_stats import to_stats as folded_stats
from gate.stats.policy import Policy
from gate.stats.record_columns import columns, fold_order
from gate.stats.registry import declared
from gate.stats.simulated_pairs import Scenario
from gate.verdicts.folds import fold
from gate.verdicts.service import run_gate
from tests import factories
from tests.gate.stats.test_registry import TOY
from tests.gate.stats.test_sql import as_floats, recorded_pairs, store
from tests.gate.ui.harness import bearer, control_app, make_keys

pytestmark = pytest.mark.postgres
POLICY = Policy(warmup_pairs=100, min_pairs=300, min_duration_s=0)


def test_the_fold_the_verdict_and_the_weekly_report_carry_a_toy_guardrail(pg_session):
    records = recorded_pairs(Scenario("toy", 600), POLICY)
    rollout = factories.rollout(pg_session, policy=POLICY.model_dump(mode="json"))
    store(pg_session, records, rollout.id)
    with declared(TOY):
        state = fold(pg_session, rollout_id=rollout.id, stage=0, policy=POLICY)
        got = folded_stats(state, POLICY)
        cols = columns(fold_order(records), POLICY, RolloutMode.SHADOW)
        want = at_look(to_stats(cols, POLICY, np.array([len(records)])), 0)
        toy = {k: v for k, v in want.cells.items() if k[0] == "tpot_tail"}
        assert len(toy) == len(POLICY.segments) + 1
        for key, cell in toy.items():
            assert as_floats(got.cells[key]) == pytest.approx(as_floats(cell), rel=1e-9), key
        assert float(np.asarray(got.cells[("tpot_tail", "all")].n)) > 300
        verdict = run_gate(pg_session, rollout_id=rollout.id, publisher=None)
        assert any(c["metric"] == "tpot_tail" for c in verdict.estimates)
        # /ui's guardrail x segment grid is the rollout's glance (GET /v1/rollouts/{id}/glance).
        look = glance.of_rollout(pg_session, rollout=rollout, verdict=verdict)
        toy_row = next(r for r in look.grid.rows if r.metric == "tpot_tail")
        assert toy_row.cells[0] is not None and toy_row.cells[0].n > 300
        year, number, _ = datetime.now(UTC).isocalendar()
        report = compute_weekly(pg_session, Week(year, number))
    week = next(w for w in report.rollouts if w.rollout_id == rollout.id)
    assert [row for row in week.guardrails if row[0] == "tpot_tail"]
    assert "| tpot_tail | TPOT exceedances" in render.markdown(report)


def test_ui_lists_a_toy_guardrail(pg_committing, pg_url):
    tokens = make_keys(pg_committing)
    with TestClient(control_app(pg_url, pg_committing)) as client:
        before = client.get("/v1/guardrails", headers=bearer(tokens["read"])).json()
        with declared(TOY):
            during = client.get("/v1/guardrails", headers=bearer(tokens["read"])).json()
    assert "tpot_tail" not in {g["id"] for g in before}
    toy = next(g for g in during if g["id"] == "tpot_tail")
    assert (toy["shadow"], toy["canary"], toy["kills"]) == ("exceedance", "unpaired_rates", True)
    assert {"ttft_p50", "acceptance_collapse", "eval"} <= {g["id"] for g in before}
