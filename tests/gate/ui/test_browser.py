"""The dashboard in real headless Chromium against the control API on real Postgres."""

from __future__ import annotations

import os
import re
import shutil
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from gate.db.base import utcnow
from gate.db.enums import Decision
from gate.rollouts.states import Action
from gate.routing import service as routing
from tests import factories
from tests.gate.reports import seed
from tests.gate.ui.harness import bearer, control_app, make_keys
from tests.servers import serving

pytestmark = pytest.mark.postgres
CHROMIUM = os.environ.get("SPECGATE_TEST_CHROMIUM", "/usr/bin/chromium")
# A closed network: nothing but 127.0.0.1 may be reached, so no background fetches.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOT = Path(os.environ.get("SPECGATE_UI_SCREENSHOT", "/tmp/specgate-ui.png"))
# Pixels of the candidate's orange (#ea580c) drawn on a chart's canvas.
INK = """(id) => {
  const c = document.getElementById(id);
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i + 3] > 0 && d[i] > 200 && d[i + 1] < 130 && d[i + 2] < 70) n++;
  }
  return n;
}"""
DRAWN = """(id) => {
  const chart = window.Chart && Chart.getChart(document.getElementById(id));
  return !!chart && chart.data.datasets.some((d) => d.data.length > 0);
}"""


@pytest.fixture(scope="module")
def playwright_api():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install playwright)")
    if not shutil.which(CHROMIUM):
        unavailable(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    with sync_playwright() as api:
        yield api


def unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}: the browser test is required in CI", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def page(playwright_api, tmp_path):
    context = playwright_api.chromium.launch_persistent_context(
        str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
    )
    tab = context.new_page()
    tab.errors = []
    tab.on("pageerror", lambda exc: tab.errors.append(str(exc)))
    tab.on("console", lambda m: m.type == "error" and tab.errors.append(m.text))
    yield tab
    context.close()


@pytest.fixture
def served(pg_committing, pg_url):
    start = utcnow() - timedelta(hours=3)
    ids = {}
    with pg_committing() as db, db.begin():
        for name, ttft in (("ngram-live", 0.15), ("eagle-next", 0.18)):
            rollout = factories.rollout(db, name=name)
            routing.change_state(
                db,
                rollout_id=rollout.id,
                action=Action.START,
                actor="test",
                reason="go",
                publisher=None,
            )
            seed.traffic(
                db,
                rollout.id,
                start=start,
                hours=3,
                pairs=120,
                baseline=seed.Arm(),
                candidate=seed.Arm(
                    ttft_s=ttft, acceptance={"chat": 0.45, "code": 0.7}, lost=0.05, unjudged=0.1
                ),
                seed=3,
            )
            seed.verdict(db, rollout.id, Decision.CONTINUE, start + timedelta(hours=2), "need_more")
            ids[name] = rollout.id
    tokens = make_keys(pg_committing)
    with serving(control_app(pg_url, pg_committing)) as base:
        yield base, tokens, ids


def sign_in(page, base, token):
    page.goto(f"{base}/ui")
    page.fill("#api-key", token)
    page.click("#login-form button[type=submit]")


def state_of(base, token, rollout_id):
    return httpx.get(f"{base}/v1/rollouts/{rollout_id}", headers=bearer(token)).json()["state"]


def test_operator_sees_charts_and_kills_a_rollout(page, served):
    from playwright.sync_api import expect

    base, tokens, ids = served
    sign_in(page, base, tokens["operate"])
    row = page.locator(f"#rollouts tbody tr[data-rollout-id='{ids['ngram-live']}']")
    expect(row.locator(".badge.state")).to_have_text("running")
    expect(row.locator(".verdict")).to_contain_text("continue")
    row.locator("button.view").click()
    expect(page.locator("#detail-title")).to_have_text("Rollout ngram-live")
    for chart in (
        "chart-ttft",
        "chart-tpot",
        "chart-acceptance",
        "chart-quality",
        "chart-failures",
    ):
        page.wait_for_function(DRAWN, arg=chart, timeout=10_000)
        assert page.evaluate(INK, chart) > 100, f"{chart} has no candidate series drawn"
    # Results no evaluator could judge are outside the rates, and said so under the chart.
    expect(page.locator("#quality-note")).to_contain_text("Not evaluable (left out of the rates)")
    expect(page.locator("#quality-note")).to_contain_text("candidate")
    page.wait_for_function(DRAWN, arg="chart-verdicts")
    expect(page.locator("#timeline tbody tr")).not_to_have_count(0)
    page.screenshot(path=str(SCREENSHOT), full_page=True)

    row.locator("button.kill").click()
    expect(page.locator("#kill-dialog")).to_be_visible()
    expect(page.locator("#kill-title")).to_have_text("Kill rollout ngram-live?")
    page.fill("#kill-reason", "TTFT p99 regression seen on the dashboard")
    page.screenshot(path=str(SCREENSHOT.with_name(SCREENSHOT.stem + "-kill.png")))
    page.click("#kill-confirm")
    expect(page.locator("#kill-dialog")).to_be_hidden()
    expect(row.locator(".badge.state")).to_have_text("killed")
    expect(row.locator("button.kill")).to_be_disabled()

    assert state_of(base, tokens["read"], ids["ngram-live"]) == "killed"
    assert state_of(base, tokens["read"], ids["eagle-next"]) == "running"
    audit = httpx.get(
        f"{base}/v1/audit", params={"rollout_id": ids["ngram-live"]}, headers=bearer(tokens["read"])
    ).json()
    assert (audit[0]["action"], audit[0]["actor"], audit[0]["reason"]) == (
        "kill",
        "key:ui-operate",
        "TTFT p99 regression seen on the dashboard",
    )
    assert page.errors == []


def test_a_read_key_sees_everything_but_cannot_kill(page, served):
    from playwright.sync_api import expect

    base, tokens, ids = served
    sign_in(page, base, tokens["read"])
    row = page.locator(f"#rollouts tbody tr[data-rollout-id='{ids['eagle-next']}']")
    expect(row.locator(".badge.state")).to_have_text("running")
    # The page knows the key's scopes: the kill controls are disabled, and say why.
    expect(row.locator("button.kill")).to_be_disabled()
    expect(row.locator("button.kill")).to_have_attribute("title", re.compile("operate scope"))
    expect(page.locator("#global-kill")).to_be_disabled()
    # The API is the authority either way: the same key is refused there.
    refused = httpx.post(
        f"{base}/v1/rollouts/{ids['eagle-next']}/kill",
        json={"reason": "trying without the scope"},
        headers=bearer(tokens["read"]),
    )
    assert refused.status_code == 403 and "operate" in refused.json()["detail"]
    assert state_of(base, tokens["read"], ids["eagle-next"]) == "running"


def test_global_kill_stops_every_rollout(page, served):
    from playwright.sync_api import expect

    base, tokens, ids = served
    sign_in(page, base, tokens["operate"])
    expect(page.locator("#rollouts tbody tr")).to_have_count(2)
    page.click("#global-kill")
    expect(page.locator("#kill-title")).to_have_text("Kill every rollout?")
    page.click("#kill-confirm")  # no reason yet: the form refuses
    expect(page.locator("#kill-dialog")).to_be_visible()
    assert state_of(base, tokens["read"], ids["ngram-live"]) == "running"
    page.fill("#kill-reason", "incident 4711: stop all speculation")
    page.click("#kill-confirm")
    expect(page.locator("#rollouts .badge.state.killed")).to_have_count(2)
    assert {state_of(base, tokens["read"], i) for i in ids.values()} == {"killed"}


def test_a_wrong_key_is_refused_and_nothing_is_stored(page, served):
    from playwright.sync_api import expect

    base, _tokens, _ids = served
    sign_in(page, base, "sg_nothere_nothing")
    expect(page.locator("#login-error")).to_contain_text("Refused")
    expect(page.locator("#app")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('specgate.apiKey')") is None
