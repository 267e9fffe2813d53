"""`specgate report weekly`, the beat entry point, and the reports endpoints."""

from __future__ import annotations

from datetime import timedelta

import pytest
import typer
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gate.cli import report as report_cli
from gate.reports.jobs import last_complete_week, run_weekly
from gate.reports.model import Week
from gate.settings import Settings
from tests import factories
from tests.gate.reports import seed
from tests.gate.ui.harness import bearer, control_app, make_keys

pytestmark = pytest.mark.postgres
WEEK = Week.parse("2026-W40")


@pytest.fixture
def committed(pg_committing):
    with pg_committing() as db, db.begin():
        rollout = factories.rollout(db, name="weekly")
        seed.traffic(
            db,
            rollout.id,
            start=WEEK.start + timedelta(days=1),
            hours=24,
            pairs=60,
            baseline=seed.Arm(),
            candidate=seed.Arm(acceptance={"chat": 0.5, "code": 0.6}),
            seed=7,
        )
    return pg_committing


def cli() -> typer.Typer:
    # How the lead wires it: `specgate report weekly`.
    root = typer.Typer()
    root.add_typer(report_cli.app, name="report")
    return root


def test_cli_writes_files_and_stores_the_report(committed, pg_url, tmp_path):
    out = tmp_path / "w40"
    args = ["report", "weekly", "--week", "2026-W40", "--out", str(out), "--database-url", pg_url]
    result = CliRunner().invoke(cli(), args)
    assert result.exit_code == 0, result.output
    assert "2026-W40" in result.output
    assert {"report.html", "report.md", "verdicts.png"} <= {p.name for p in out.iterdir()}
    app = control_app(pg_url, committed)
    tokens = make_keys(committed)
    with TestClient(app) as client:
        listed = client.get("/v1/reports", headers=bearer(tokens["read"]))
        assert listed.status_code == 200
        (brief,) = listed.json()
        assert (brief["kind"], brief["period"]) == ("weekly", "2026-W40")
        assert brief["location"] == str(out.resolve())
        full = client.get(f"/v1/reports/{brief['id']}", headers=bearer(tokens["read"])).json()
        assert full["markdown"] == (out / "report.md").read_text()
        assert full["summary"]["rollouts"][0]["name"] == "weekly"
        assert client.get("/v1/reports").status_code == 401
        assert client.get("/v1/reports/999", headers=bearer(tokens["read"])).status_code == 404


def test_cli_refuses_a_malformed_week(tmp_path, pg_url):
    args = ["report", "weekly", "--week", "47", "--out", str(tmp_path), "--database-url", pg_url]
    result = CliRunner().invoke(cli(), args)
    assert result.exit_code != 0
    assert "ISO week" in str(result.exception)


def test_beat_entry_point_writes_under_home(committed, pg_url, tmp_path):
    settings = Settings(database_url=pg_url, home=tmp_path)
    first = run_weekly(settings, week="2026-W40")
    again = run_weekly(settings, week="2026-W40")
    assert first == again
    assert (tmp_path / "reports" / "2026-W40" / "report.md").exists()


def test_default_week_is_the_last_complete_one():
    monday = WEEK.start + timedelta(days=7, hours=1)
    assert last_complete_week(monday) == WEEK
    assert last_complete_week(WEEK.end - timedelta(seconds=1)) == WEEK.previous()
