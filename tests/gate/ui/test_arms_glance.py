"""A rollout with three arms in real headless Chromium (issue 40): the headline names the
winner and the arm killed on its own; the arms table shows each arm's state and interval."""

from __future__ import annotations

import httpx
import pytest

from tests.gate.ui import glance_seed
from tests.gate.ui.harness import bearer, control_app, make_keys
from tests.gate.ui.test_browser import page as browser_page
from tests.gate.ui.test_browser import playwright_api, sign_in
from tests.gate.ui.test_glance import SHOTS, show
from tests.servers import serving

pytestmark = pytest.mark.postgres
__all__ = ["browser_page", "playwright_api"]  # fixtures shared with the browser test


@pytest.fixture
def armed(pg_committing, pg_url):
    with pg_committing() as db, db.begin():
        rollout_id = glance_seed.armed(db)
    tokens = make_keys(pg_committing)
    with serving(control_app(pg_url, pg_committing)) as base:
        yield base, tokens, rollout_id


def test_the_arms_read_at_a_glance(browser_page, armed):
    from playwright.sync_api import expect

    page = browser_page
    base, tokens, rollout_id = armed
    glance = httpx.get(f"{base}/v1/rollouts/{rollout_id}/glance", headers=bearer(tokens["read"]))
    arms = glance.json()["headline"]["arms"]
    assert [(a["arm"], a["state"], a["role"]) for a in arms] == [
        ("k4", "promoted", "winner"), ("k8", "killed", ""), ("k2", "running", ""),
    ]  # fmt: skip
    page.set_viewport_size({"width": 1400, "height": 1000})
    sign_in(page, base, tokens["read"])
    text = show(page, rollout_id)
    assert "arm 'k4' is the best arm" in text
    assert "killed on its own: arm 'k8' (harm proven in task)" in text
    expect(page.locator("#arms")).to_be_visible()
    expect(page.locator("#arms-table thead th").nth(3)).to_have_text("TPOT vs baseline")
    rows = page.locator("#arms-table tbody tr")
    expect(rows).to_have_count(3)
    for arm, row in zip(arms, rows.all(), strict=True):
        cells = row.locator("td")
        badge = arm["role"] if arm["role"] != arm["state_words"] else ""
        expect(cells.nth(0)).to_have_text(f"{arm['arm']} {badge}".strip())
        expect(cells.nth(1)).to_have_text(arm["state_words"])
        expect(cells.nth(4)).to_have_text(arm["interval"])
    expect(rows.nth(1).locator("td").nth(5)).to_have_text("harm proven in task")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#answer").screenshot(path=str(SHOTS / "arms.png"))
    assert page.errors == []
