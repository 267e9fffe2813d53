"""Alerting rules: promtool accepts and unit-tests them; they name only exported metrics."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.exported import metric_names, project_metrics, vllm_metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = sorted((DEPLOY / "rules").glob("*.yml"))
ALERTS = {
    "SpecgateAcceptanceCollapse",
    "SpecgateFallbackSpike",
    "SpecgateKillSwitchFlipped",
    "SpecgateCollectorSpooling",
    "SpecgateProcessDown",
    "SpecgateProcessAbsent",
    "SpecgateVerdictsStale",
    "SpecgatePubsubDisconnected",
    "SpecgateRouteDown",
}
# Series Prometheus makes itself for every scrape target.
PROMETHEUS_SERIES = {"up"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        reason = "promtool not installed (apt-get install -y prometheus)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return found


def rules():
    for path in RULES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            yield from group["rules"]


def test_promtool_checks_the_rules_and_the_config():
    tool = promtool()
    for args in (
        ["check", "rules", *map(str, RULES)],
        ["check", "config", str(DEPLOY / "prometheus.yml")],
    ):
        result = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_fire_and_resolve_the_alerts():
    tool = promtool()
    tests = sorted(str(p) for p in (DEPLOY / "tests").glob("*.yml"))
    result = subprocess.run(
        [tool, "test", "rules", *tests], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    tested = set()
    for path in tests:
        for case in yaml.safe_load(Path(path).read_text())["tests"]:
            tested |= {t["alertname"] for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert {r["alert"] for r in rules()} <= tested, "every alert is shown to fire"


def test_the_issue_s_alerts_exist():
    assert {r["alert"] for r in rules()} >= ALERTS


def test_rules_name_only_metrics_that_are_exported():
    known = project_metrics() | vllm_metrics() | PROMETHEUS_SERIES
    for rule in rules():
        names = metric_names(rule["expr"])
        assert names, f"{rule['alert']}: no metric found in its expression"
        assert names <= known, f"{rule['alert']} names unknown metrics {names - known}"


def test_the_name_extractor_sees_through_promql():
    expr = (
        'sum by (route) (rate(a_total{status="x y", q=~"$route"}[5m] offset 5m)) '
        "/ on (m) group_left sum(b:c_bucket) > 0.5 and histogram_quantile(0.9, d) == bool 1"
    )
    assert metric_names(expr) == {"a_total", "b:c_bucket", "d"}
    assert "specgate_gateway_route_calls_total" in project_metrics()
    assert "specgate_collector_spool_bytes" in project_metrics()
