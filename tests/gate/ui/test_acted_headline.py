"""An operator's kill, read back on every surface: /ui in Chromium, the glance and table
APIs, `specgate rollout show` (a real process) and the weekly report.

The gate judged the candidate harmful but its policy does not kill on its own, so the
rollout runs until an operator kills it from /ui. From then on every headline leads with
the kill (who, when, why) and keeps the gate's latest view after it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from gate.db.base import utcnow
from gate.reports.model import Week
from gate.reports.weekly import build_weekly
from tests.gate.ui import glance_seed
from tests.gate.ui.harness import bearer, control_app, make_keys
from tests.gate.ui.test_browser import page as browser_page
from tests.gate.ui.test_browser import playwright_api, sign_in
from tests.gate.ui.test_glance import show
from tests.servers import serving

pytestmark = pytest.mark.postgres
__all__ = ["browser_page", "playwright_api"]  # fixtures shared with the browser test
SHOTS = Path(os.environ.get("SPECGATE_UI_SCREENSHOTS", "test-output/ui-glance"))
REASON = "failures seen on the dashboard, incident 5150"
# The gate says kill, but leaves the switch to people.
ADVISORY = {**glance_seed.POLICY, "auto_kill": False}


@pytest.fixture
def advisory(pg_committing, pg_url):
    start = utcnow() - timedelta(minutes=50)
    failing = glance_seed.KINDS["failing"]
    with pg_committing() as db, db.begin():
        rollout_id = glance_seed.judge(
            db, name="rollout-b", pairs=failing[0], candidate=failing[1], policy=ADVISORY,
            start=start,
        )  # fmt: skip
    tokens = make_keys(pg_committing)
    with serving(control_app(pg_url, pg_committing)) as base:
        yield base, tokens, rollout_id


def test_an_operators_kill_leads_every_headline(browser_page, advisory, pg_committing, pg_url):
    from playwright.sync_api import expect

    page = browser_page
    base, tokens, rollout_id = advisory
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1280, "height": 800})
    sign_in(page, base, tokens["operate"])
    assert show(page, rollout_id).startswith("Kill")  # the gate's verdict, nobody acted yet
    row = page.locator(f"#rollouts tbody tr[data-rollout-id='{rollout_id}']")
    row.locator("button.kill").click()
    page.fill("#kill-reason", REASON)
    page.click("#kill-confirm")
    expect(row.locator(".badge.state")).to_have_text("killed")
    expect(page.locator("#headline")).to_contain_text("Killed")
    page.screenshot(path=str(SHOTS / "operator-kill.png"))

    audit = httpx.get(
        f"{base}/v1/audit", params={"rollout_id": rollout_id}, headers=bearer(tokens["read"])
    ).json()[0]
    at = datetime.fromisoformat(audit["created_at"]).strftime("%Y-%m-%d %H:%M")
    lead = f'Killed: by key:ui-operate at {at} UTC, because "{REASON}".'
    view = "The gate's latest view: Kill: the candidate fails more often"

    look = httpx.get(f"{base}/v1/rollouts/{rollout_id}/glance", headers=bearer(tokens["read"]))
    head = look.json()["headline"]
    assert head["sentence"].startswith(lead) and view in head["sentence"], head["sentence"]
    assert (head["decision"], head["decision_words"], head["verdict_decision"]) == (
        "kill",
        "Killed",
        "kill",
    )
    assert (head["act"]["actor"], head["act"]["reason"]) == ("key:ui-operate", REASON)

    shown = page.locator("#headline").inner_text()
    assert shown.startswith("Killed") and lead.removeprefix("Killed:") in shown
    assert view in shown
    table = httpx.get(f"{base}/v1/dashboard/rollouts", headers=bearer(tokens["read"])).json()
    assert table[0]["headline"] == head["sentence"]
    # The table's verdict column keeps the gate's view; its state column says who killed.
    assert table[0]["verdict_words"] == head["verdict_sentence"]
    expect(row.locator(".verdict")).to_contain_text("the candidate fails more often")
    expect(row.locator(".state-reason")).to_have_text(REASON)
    # A killed rollout sends its candidate nothing: its share is not the stage's any more.
    expect(row.locator("td").nth(6)).to_have_text("0 % (killed)")

    cli = subprocess.run(
        [sys.executable, "-m", "gate", "rollout", "show", str(rollout_id),
         "--database-url", pg_url],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    flat = " ".join(cli.split())
    assert f"KILLED: by key:ui-operate at {at} UTC" in flat and REASON in flat, cli
    assert view in flat, cli

    with pg_committing() as db, db.begin():
        report = build_weekly(db, Week.containing(utcnow()), out_dir=SHOTS / "acted-report")
    assert f"**{head['sentence']}**" in report.markdown
    assert report.summary()["headlines"]["rollout-b"] == head["sentence"]
    assert page.errors == []
