"""The dashboard's JSON: numbers equal the rows, scopes hold, both dialects agree."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from fastapi.testclient import TestClient

from gate.db.base import utcnow
from gate.db.enums import Decision
from gate.reports import dashboard
from gate.reports.intervals import wilson
from tests import factories
from tests.gate.reports import seed
from tests.gate.ui.harness import bearer, control_app, make_keys


def bucket(at: datetime, step: int) -> datetime:
    return datetime.fromtimestamp(int(at.timestamp()) // step * step, UTC)


@pytest.fixture
def live(pg_committing, pg_url):
    start = utcnow() - timedelta(hours=3)
    with pg_committing() as db, db.begin():
        rollout = factories.rollout(db, name="live")
        records = seed.traffic(
            db,
            rollout.id,
            start=start,
            hours=3,
            pairs=150,
            baseline=seed.Arm(),
            candidate=seed.Arm(
                ttft_s=0.15,
                fail=0.1,
                lost=0.1,
                unjudged=0.2,
                acceptance={"chat": 0.4, "code": 0.75},
            ),
            seed=11,
        )
        seed.verdict(db, rollout.id, Decision.CONTINUE, start + timedelta(hours=1), "need_more")
        seed.verdict(db, rollout.id, Decision.HOLD, start + timedelta(hours=2), "budget")
    tokens = make_keys(pg_committing)
    with TestClient(control_app(pg_url, pg_committing)) as client:
        yield client, tokens, rollout.id, records


@pytest.mark.postgres
def test_series_equal_what_the_rows_say(live):
    client, tokens, rollout_id, records = live
    got = client.get(f"/v1/rollouts/{rollout_id}/dashboard?hours=4", headers=bearer(tokens["read"]))
    assert got.status_code == 200, got.text
    body = got.json()
    step = body["bucket_s"]
    assert step == 300
    groups = defaultdict(list)
    for r in records:
        if r.status == "ok":
            groups[(bucket(r.started_at, step), r.cohort)].append(r)
    points = {(datetime.fromisoformat(p["t"]), p["cohort"]): p for p in body["latency"]}
    assert set(points) == set(groups)
    for key, rows in groups.items():
        ttft = [r.ttft_s for r in rows]
        assert points[key]["n"] == len(rows)
        assert points[key]["ttft_p50"] == pytest.approx(float(np.quantile(ttft, 0.5)))
        assert points[key]["ttft_p99"] == pytest.approx(float(np.quantile(ttft, 0.99)))
        tpot = [r.tpot_s for r in rows]
        assert points[key]["tpot_p99"] == pytest.approx(float(np.quantile(tpot, 0.99)))
    for row in body["acceptance"]:
        cand = [
            r
            for r in records
            if r.cohort == "candidate" and r.status == "ok" and r.segment == row["segment"]
        ]
        rate = sum(r.accepted for r in cand) / sum(r.draft_tokens for r in cand)
        assert row["rate"] == pytest.approx(rate)
    for row in body["quality"]:
        results = [
            r.evaluations[row["evaluator"]]
            for r in records
            if r.cohort == row["cohort"] and r.evaluations
        ]
        arm = [p for p in results if p is not None]  # not evaluable: outside the rate
        expected = wilson(sum(arm), len(arm))
        assert (row["passed"], row["n"]) == (sum(arm), len(arm))
        assert row["not_evaluable"] == len(results) - len(arm)
        assert (row["low"], row["high"]) == pytest.approx((expected.low, expected.high))
    failed = sum(
        p["error_rate"] * p["n"] + p["fallback_rate"] * p["n"]
        for p in body["failures"]
        if p["cohort"] == "candidate"
    )
    candidate = [r for r in records if r.cohort == "candidate"]
    assert round(failed) == sum(r.status in ("error", "timeout", "fallback") for r in candidate)
    lost = sum(
        p["not_attributable_rate"] * p["n"] for p in body["failures"] if p["cohort"] == "candidate"
    )
    assert 0 < round(lost) == sum(r.status in ("dropped", "cancelled") for r in candidate)
    assert sum(row["not_evaluable"] for row in body["quality"]) > 0
    assert [v["decision"] for v in body["verdicts"]] == ["continue", "hold"]


@pytest.mark.postgres
def test_overview_shows_the_latest_verdict(live):
    client, tokens, rollout_id, _ = live
    rows = client.get("/v1/dashboard/rollouts", headers=bearer(tokens["read"])).json()
    (row,) = rows
    assert (row["id"], row["state"], row["latest_verdict"]["decision"]) == (
        rollout_id,
        "pending",
        "hold",
    )
    assert (row["baseline_route"], row["candidate_route"]) == ("live-base", "live-spec")
    assert row["sandbox"] == "bwrap"
    # The share is the sample rate times the stage's percent (default stages 1, 5, 25, 100).
    assert row["share"] == pytest.approx(row["sample_rate"] * 0.01)
    assert row["next_share"] == pytest.approx(row["sample_rate"] * 0.05)
    assert "next stage (promote)" in row["exposure"]


@pytest.mark.postgres
def test_overview_flags_a_policy_that_runs_code_without_the_sandbox(pg_committing, pg_url):
    with pg_committing() as db, db.begin():
        factories.rollout(db, name="laptop", policy={"sandbox": "unsafe-local"})
        factories.rollout(db, name="server")
    tokens = make_keys(pg_committing)
    with TestClient(control_app(pg_url, pg_committing)) as client:
        rows = client.get("/v1/dashboard/rollouts", headers=bearer(tokens["read"])).json()
        routes = {"baseline_route": "server-base", "candidate_route": "server-spec"}
        bad = {"name": "bad", "alias": "bad", **routes, "policy": {"sandbox": "none"}}
        refused = client.post("/v1/rollouts", json=bad, headers=bearer(tokens["admin"]))
    assert {r["name"]: r["sandbox"] for r in rows} == {"laptop": "unsafe-local", "server": "bwrap"}
    assert refused.status_code in (400, 422) and "sandbox" in refused.text


@pytest.mark.postgres
def test_series_need_a_key_and_a_real_rollout(live):
    client, tokens, rollout_id, _ = live
    assert client.get(f"/v1/rollouts/{rollout_id}/dashboard").status_code == 401
    assert client.get("/v1/dashboard/rollouts").status_code == 401
    read = bearer(tokens["read"])
    assert client.get("/v1/rollouts/4242/dashboard", headers=read).status_code == 404
    assert (
        client.get(f"/v1/rollouts/{rollout_id}/dashboard?hours=0", headers=read).status_code == 422
    )
    naive = client.get(
        f"/v1/rollouts/{rollout_id}/dashboard?until=2026-11-20T12:00:00", headers=read
    )
    assert naive.status_code == 400


@pytest.mark.postgres
def test_page_and_assets_are_served_with_a_strict_policy(live):
    client, *_ = live
    page = client.get("/ui")
    assert page.status_code == 200 and "<canvas" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    chart = client.get("/ui/static/chart.umd.min.js")
    assert chart.status_code == 200 and chart.text.startswith("/*!\n * Chart.js v4.6.1")
    assert client.get("/ui/static/..%2f..%2fapp.py").status_code == 404
    assert client.get("/ui/static/index.html").status_code == 404


@pytest.mark.postgres
def test_postgres_and_sqlite_give_the_same_series(pg_session, sqlite_session):
    start = datetime(2026, 3, 2, 10, tzinfo=UTC)
    results = []
    for db in (pg_session, sqlite_session):
        rollout = factories.rollout(db, name="twin")
        seed.traffic(
            db,
            rollout.id,
            start=start,
            hours=2,
            pairs=80,
            baseline=seed.Arm(),
            candidate=seed.Arm(acceptance={"chat": 0.5, "code": 0.6}),
            seed=5,
        )
        got = dashboard.rollout_dashboard(
            db, rollout_id=rollout.id, since=start, until=start + timedelta(hours=2)
        )
        results.append(got.model_dump(exclude={"rollout_id", "verdicts", "events"}))
    pg, lite = results
    assert pg["latency"] and pg["failures"] and pg["acceptance"] and pg["quality"]
    _close(pg, lite)


def _close(a, b):
    assert a.keys() == b.keys()
    for key in ("acceptance", "quality", "failures"):
        assert a[key] == b[key]
    for x, y in zip(a["latency"], b["latency"], strict=True):
        assert (x["t"], x["cohort"], x["n"]) == (y["t"], y["cohort"], y["n"])
        for field in ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99"):
            assert x[field] == pytest.approx(y[field], rel=1e-9)
    return True
