"""Grafana provisioning: panel SQL runs on the migrated schema; PromQL names real metrics."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from sqlalchemy import insert

from gate.db.enums import Cohort, Decision, GenerationStatus, Outcome, sql_statuses, statuses_of
from gate.db.models import EngineSample
from gate.reports.intervals import wilson
from gate.reports.queries import Window, pass_counts
from gate.rollouts.states import Action
from tests import factories
from tests.deploy.exported import metric_names, project_metrics, vllm_metrics
from tests.gate.reports import seed

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
FROM, TO = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 3, tzinfo=UTC)


def load(path):
    return json.loads(path.read_text())


def panels(dashboard):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def datasource_uids():
    config = yaml.safe_load((GRAFANA / "provisioning/datasources/specgate.yaml").read_text())
    return {d["uid"]: d["type"] for d in config["datasources"]}


def is_postgres(target_or_var):
    return datasource_uids()[target_or_var["datasource"]["uid"]] == "grafana-postgresql-datasource"


def queries(kind):
    """Yield (where, query) for every panel target and variable of one datasource kind."""
    for path in DASHBOARDS:
        dashboard = load(path)
        for panel in panels(dashboard):
            for target in panel.get("targets", []):
                if is_postgres(target) == (kind == "sql"):
                    yield f"{path.name}: {panel['title']}", target.get("rawSql") or target["expr"]
        for var in dashboard["templating"]["list"]:
            if is_postgres(var) == (kind == "sql"):
                query = var["query"] if kind == "sql" else var["query"]["query"]
                yield f"{path.name}: variable {var['name']}", query


def substitute(sql, *, rollout_id, since=FROM, until=TO, name="probe", segments=("chat", "code")):
    """Expand the Grafana macros and variables the dashboards use, as Grafana would."""
    span = f"'{since.isoformat()}'::timestamptz AND '{until.isoformat()}'::timestamptz"
    sql = re.sub(r"\$__timeFilter\(([^)]+)\)", rf"\1 BETWEEN {span}", sql)
    sql = re.sub(
        r"\$__timeGroupAlias\(([^,]+),\s*\$__interval\)",
        r"""to_timestamp(floor(extract(epoch FROM \1) / 300) * 300) AS "time" """,
        sql,
    )
    values = {
        "rollout": str(rollout_id),
        "route": f"'{name}-base','{name}-spec'",
        "segment": ",".join(f"'{segment}'" for segment in segments),
    }
    for name, value in values.items():
        sql = re.sub(rf"\$\{{{name}(:\w+)?\}}|\${name}\b", value, sql)
    assert "$" not in sql, f"unexpanded macro or variable left in: {sql}"
    return sql


@pytest.fixture
def probe(pg_session):
    db = pg_session
    rollout = factories.rollout(db, name="probe")
    seed.traffic(
        db,
        rollout.id,
        start=FROM + timedelta(hours=1),
        hours=20,
        pairs=40,
        baseline=seed.Arm(fail=0.2),
        candidate=seed.Arm(fail=0.2, lost=0.1, unjudged=0.3, acceptance={"chat": 0.5, "code": 0.7}),
        seed=9,
    )
    seed.verdict(db, rollout.id, Decision.CONTINUE, FROM + timedelta(hours=5), "need_more")
    seed.act(db, rollout.id, Action.START, FROM + timedelta(hours=2), "go")
    db.execute(
        insert(EngineSample),
        [
            {
                "route_id": rollout.baseline_route_id,
                "metric": metric,
                "value": 0.5,
                "labels": {},
                "scraped_at": FROM + timedelta(hours=h),
            }
            for metric in ("spec_acceptance_rate_window", "requests_running", "kv_cache_usage")
            for h in (1, 2, 3)
        ],
    )
    return db, rollout.id


@pytest.mark.postgres
def test_every_panel_and_variable_query_runs_on_the_schema(probe):
    db, rollout_id = probe
    ran = 0
    connection = db.connection()
    for where, sql in queries("sql"):
        with connection.begin_nested():
            try:
                rows = connection.exec_driver_sql(substitute(sql, rollout_id=rollout_id)).all()
            except Exception as exc:
                pytest.fail(f"{where}: {exc}")
        assert rows, f"{where}: no rows over seeded data"
        ran += 1
    assert ran >= 15


@pytest.mark.postgres
def test_time_series_panels_return_a_time_column(probe):
    db, rollout_id = probe
    for path in DASHBOARDS:
        for panel in panels(load(path)):
            for target in panel.get("targets", []):
                if is_postgres(target) and target["format"] == "time_series":
                    sql = substitute(target["rawSql"], rollout_id=rollout_id)
                    result = db.connection().exec_driver_sql(sql)
                    assert "time" in list(result.keys()), panel["title"]


def test_promql_names_only_exported_metrics():
    known = project_metrics() | vllm_metrics()
    seen = set()
    for where, expr in queries("promql"):
        if expr.startswith("label_values("):
            expr = expr[len("label_values(") :].split(",")[0]
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        assert names <= known, f"{where}: unknown metrics {names - known}"
        seen |= names
    assert any(n.startswith("vllm:") for n in seen)
    assert any(n.startswith("specgate_collector_") for n in seen)
    assert any(n.startswith("specgate_gateway_") for n in seen)


def test_dashboards_are_well_formed_and_provisioned():
    uids = datasource_uids()
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/specgate.yaml").read_text())
    assert provider["providers"][0]["options"]["path"]
    seen_uids = set()
    for path in DASHBOARDS:
        dashboard = load(path)
        assert dashboard["uid"] not in seen_uids
        seen_uids.add(dashboard["uid"])
        ids = [p["id"] for p in panels(dashboard)]
        assert len(ids) == len(set(ids)), f"{path.name}: duplicate panel ids"
        for panel in panels(dashboard):
            assert panel["datasource"]["uid"] in uids, panel["title"]
            assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        names = {v["name"] for v in dashboard["templating"]["list"]}
        assert {"rollout", "route"} <= names
    postgres = load(GRAFANA / "dashboards/specgate-rollouts.json")
    assert {v["name"] for v in postgres["templating"]["list"]} == {"rollout", "route", "segment"}


def test_seeded_statuses_cover_every_rate_the_panels_compute():
    # The failure panel's CASE arms must match the stored status values.
    text = (GRAFANA / "dashboards/specgate-rollouts.json").read_text()
    for status in GenerationStatus:
        if status is not GenerationStatus.OK:
            assert f"'{status.value}'" in text
    assert f"'{Cohort.CANDIDATE.value}'" in text


def test_the_failure_panel_uses_the_one_outcome_definition():
    dashboard = load(GRAFANA / "dashboards/specgate-rollouts.json")
    (panel,) = [p for p in panels(dashboard) if "not-attributable" in p["title"]]
    sql = panel["targets"][0]["rawSql"]
    assert (
        f"IN ({sql_statuses(Outcome.NOT_ATTRIBUTABLE)}) THEN 1.0 ELSE 0.0 END) AS not_attrib" in sql
    )
    failures = {s for s in statuses_of(Outcome.ROUTE_FAILURE)}
    assert failures == {"error", "timeout", "fallback"} and all(f"'{s}'" in sql for s in failures)


@pytest.mark.postgres
def test_the_wilson_interval_in_sql_equals_the_dashboard_s(probe):
    db, rollout_id = probe
    dashboard = load(GRAFANA / "dashboards/specgate-rollouts.json")
    (panel,) = [p for p in panels(dashboard) if "Wilson" in p["title"]]
    sql = substitute(panel["targets"][0]["rawSql"], rollout_id=rollout_id)
    rows = db.connection().exec_driver_sql(sql).mappings().all()
    assert rows and sum(row["not_evaluable"] for row in rows) > 0
    window = Window(rollout_id, FROM, TO)
    # The same judged counts as the report and /ui: not-evaluable results are outside n.
    want = {(r.evaluator, r.cohort.value): (r.n, r.not_evaluable) for r in pass_counts(db, window)}
    assert {(r["evaluator"], r["cohort"]): (r["n"], r["not_evaluable"]) for r in rows} == want
    for row in rows:
        k = round(row["pass_rate"] * row["n"])
        expected = wilson(k, row["n"])
        assert (row["wilson_low"], row["wilson_high"]) == pytest.approx(
            (expected.low, expected.high), abs=1e-6
        )
