"""/ui at 1280 px wide in real Chromium: the headline first, the grid whole, a page per
rollout, the decision word the loudest, and a Promote headline that says what comes next.

A rollout judged over seven segments (the grid's widest case) is shown among a dozen
others; screenshots go to the test's output folder.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from gate.db.base import utcnow
from tests import factories
from tests.gate.reports import seed
from tests.gate.ui import glance_seed
from tests.gate.ui.harness import control_app, make_keys
from tests.gate.ui.test_browser import page as browser_page
from tests.gate.ui.test_browser import playwright_api, sign_in
from tests.servers import serving

pytestmark = pytest.mark.postgres
__all__ = ["browser_page", "playwright_api"]  # fixtures shared with the browser test
SHOTS = Path(os.environ.get("SPECGATE_UI_SCREENSHOTS", "test-output/ui-glance"))
WIDE = ("chat", "code", "rag", "summarize", "translate", "creative", "long-context")
POLICY = {**glance_seed.POLICY, "segments": list(WIDE), "stages": [1, 5, 100]}
FAST = seed.Arm(ttft_s=0.2, tpot_s=0.012, fail=0.0, acceptance=dict.fromkeys(WIDE, 0.65))
SIZE = {"width": 1280, "height": 800}
# The grid's box, and its last header cell once the box is scrolled to its right end.
GRID = """() => {
  const table = document.getElementById('guardrail-grid');
  const box = table.parentElement;
  box.scrollLeft = box.scrollWidth;
  const last = table.querySelector('thead th:last-child').getBoundingClientRect();
  const b = box.getBoundingClientRect();
  return {page: document.documentElement.scrollWidth, boxLeft: b.left, boxRight: b.right,
          lastLeft: last.left, lastRight: last.right};
}"""
FONT = "(sel) => parseFloat(getComputedStyle(document.querySelector(sel)).fontSize)"


@pytest.fixture
def crowded(pg_committing, pg_url):
    with pg_committing() as db, db.begin():
        for i in range(11):
            factories.rollout(db, name=f"filler-{i:02d}")
        wide = glance_seed.judge(
            db, name="wide", pairs=1400, candidate=FAST, policy=POLICY,
            start=utcnow() - timedelta(minutes=50), segments=WIDE,
        )  # fmt: skip
    tokens = make_keys(pg_committing)
    with serving(control_app(pg_url, pg_committing)) as base:
        yield base, tokens, wide


def test_ui_at_1280_px(browser_page, crowded):
    from playwright.sync_api import expect

    page = browser_page
    base, tokens, wide = crowded
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size(SIZE)
    sign_in(page, base, tokens["read"])
    expect(page.locator("#rollouts tbody tr")).to_have_count(12)
    page.wait_for_function(
        "(id) => document.getElementById('headline').dataset.rollout === String(id)", arg=wide
    )
    page.screenshot(path=str(SHOTS / "ui-1280.png"))
    # The headline comes before the table, and stays above the fold however many rollouts.
    head = page.locator("#headline").bounding_box()
    table = page.locator("#rollouts").bounding_box()
    assert head is not None and table is not None
    assert head["y"] < table["y"] and head["y"] + head["height"] <= SIZE["height"]
    # The decision word is the loudest thing in the headline.
    assert page.evaluate(FONT, "#headline .badge") > page.evaluate(FONT, "#headline .sentence")
    # A Promote headline says what promoting does next.
    text = page.locator("#headline").inner_text()
    assert text.startswith("Promote"), text
    assert "promoting moves it to stage 2 of 3: 0.5 % of requests mirrored to" in text
    # The grid (all segments and seven more) fits or scrolls in its box: nothing cut off.
    page.locator("#guardrail-grid").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "ui-1280-grid.png"))
    grid = page.evaluate(GRID)
    assert grid["page"] <= SIZE["width"], grid
    assert grid["boxRight"] <= SIZE["width"], grid
    assert grid["boxLeft"] - 1 <= grid["lastLeft"] and grid["lastRight"] <= grid["boxRight"] + 1
    page.screenshot(path=str(SHOTS / "ui-1280-grid-scrolled.png"))
    # Each rollout links to its own page, which shows that rollout's answer.
    link = page.locator(f"#rollouts tbody tr[data-rollout-id='{wide}'] a.rollout-link")
    expect(link).to_have_attribute("href", f"/ui/rollouts/{wide}")
    link.click()
    page.wait_for_url(f"{base}/ui/rollouts/{wide}")
    expect(page.locator("#rollouts tbody tr")).to_have_count(1)
    expect(page.locator("#detail-title")).to_have_text("Rollout wide")
    expect(page.locator("#headline")).to_contain_text("promoting moves it to stage 2 of 3")
    page.screenshot(path=str(SHOTS / "ui-1280-rollout-page.png"))
    assert httpx.get(f"{base}/ui/rollouts/{wide}").status_code == 200
    assert page.errors == []
