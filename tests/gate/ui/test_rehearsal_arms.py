"""A several-arm rehearsal (`specgate rehearse --candidate NAME=URL` x 3) in real headless
Chromium: each arm's exactness, its speedup per level at its own Bonferroni confidence, its
crossover and its answer at --at, with the lead arm and the paying arms marked and the arm
that is not exact shown as never chosen. Screenshots go to test-output/.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from tests import factories
from tests.gate.rehearse.summaries import arms_summary
from tests.gate.ui.harness import bearer, control_app, make_keys
from tests.gate.ui.test_browser import DRAWN, playwright_api, sign_in
from tests.gate.ui.test_browser import page as browser_page
from tests.gate.ui.test_glance import show
from tests.servers import serving

pytestmark = pytest.mark.postgres
__all__ = ["browser_page", "playwright_api"]  # fixtures shared with the browser test
SHOTS = Path(os.environ.get("SPECGATE_UI_SCREENSHOTS", "test-output/ui-rehearsal"))


@pytest.fixture
def rehearsed(pg_committing, pg_url):
    with pg_committing() as db, db.begin():
        rollout_id = factories.rollout(db, name="three-ngram-arms").id
    tokens = make_keys(pg_committing)
    with serving(control_app(pg_url, pg_committing)) as base:
        path = f"{base}/v1/rollouts/{rollout_id}/rehearsals"
        answer = httpx.post(path, json=arms_summary(at=2), headers=bearer(tokens["admin"]))
        assert answer.status_code == 201, answer.text
        yield base, tokens, rollout_id, answer.json()


def test_each_arm_of_a_rehearsal_reads_with_its_interval_crossover_and_role(
    browser_page, rehearsed
):
    from playwright.sync_api import expect

    page = browser_page
    base, tokens, rollout_id, recorded = rehearsed
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 1000})
    sign_in(page, base, tokens["read"])
    show(page, rollout_id)
    expect(page.locator("#rehearsal-sentence")).to_have_text(recorded["sentence"])
    expect(page.locator("#rehearsal-lines li")).to_have_text(recorded["lines"])
    section = page.locator("#rehearsal-arms-section")
    expect(section).to_be_visible()
    expect(page.locator("#rehearsal-arms-note")).to_contain_text(
        "3 arms against the same baseline, each arm's intervals at 98.3 % (alpha 0.0167 = 0.05 / 3"
    )
    table = page.locator("#rehearsal-arms")
    expect(table.locator("thead th .name")).to_have_text(["k2", "k4", "k8"])
    expect(table.locator("tbody th")).to_have_text(
        ["exactness", "speedup at 1", "speedup at 2", "speedup at 4", "speedup at 8",
         "crossover", "at 2"]
    )  # fmt: skip
    for arm in recorded["arms"]:
        column = table.locator(f"tbody td[data-arm='{arm['name']}']")
        answer = arm["decision"] if arm["usable"] else "never chosen"
        expect(column).to_have_text([arm["exactness"], *arm["speedups"], arm["crossover"], answer])
        expect(column.first).to_have_attribute("title", arm["exactness_detail"])
    # k4 leads (its curve is the chart) and pays; k2 pays; k8 is not exact: never chosen.
    expect(table.locator("thead th.lead")).to_have_attribute("data-arm", "k4")
    expect(table.locator("thead th[data-arm='k4'] .badge")).to_have_text(["lead", "pays"])
    expect(table.locator("thead th[data-arm='k2'] .badge")).to_have_text(["pays"])
    expect(table.locator("thead th[data-arm='k8'] .badge")).to_have_text(["never chosen"])
    expect(table.locator("thead th[data-arm='k8']")).to_have_class("arm unusable")
    # k4's speedup at 8 is proven below 1: its cell reads as the candidate slower.
    expect(table.locator("tbody td[data-arm='k4'].call").last).to_have_class(
        "arm lead pays call candidate-slower"
    )
    expect(page.locator("#rehearsal-best li")).to_have_text(recorded["best"])
    expect(page.locator("#rehearsal-caption")).to_have_text(
        "The lead arm k4's speedup (baseline / candidate s per token) vs concurrent requests, "
        "per segment, 98.3 % intervals; dashed: no gain"
    )
    page.wait_for_function(DRAWN, arg="chart-rehearsal")
    page.locator("#rehearsal-section").screenshot(path=str(SHOTS / "rehearsal-arms.png"))
    page.screenshot(path=str(SHOTS / "rehearsal-arms-page.png"), full_page=True)
    assert page.errors == []
