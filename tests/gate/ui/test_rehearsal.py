"""A rollout's rehearsal beside its live load bands, in real headless Chromium.

The rollout is judged by the real gate on pairs whose engines reported their load, so its
verdict has load bands; a deploy pipeline records its rehearsal through the API. The SRE
sees both side by side: the live speedup per band and the rehearsal's curve with its
crossover and the answer at the production concurrency. Screenshots go to test-output/.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from tests import factories
from tests.gate.ui import glance_seed
from tests.gate.ui.harness import bearer, control_app, make_keys
from tests.gate.ui.test_browser import DRAWN, playwright_api, sign_in
from tests.gate.ui.test_browser import page as browser_page
from tests.gate.ui.test_glance import show
from tests.servers import serving

pytestmark = pytest.mark.postgres
__all__ = ["browser_page", "playwright_api"]  # fixtures shared with the browser test
SHOTS = Path(os.environ.get("SPECGATE_UI_SCREENSHOTS", "test-output/ui-rehearsal"))
REAL = Path(__file__).parents[3] / "bench" / "results" / "rehearsal-llamacpp-2026-11-25.json"


@pytest.fixture
def rehearsed(pg_committing, pg_url):
    with pg_committing() as db, db.begin():
        ids = {"banded": glance_seed.banded(db), "bare": factories.rollout(db, name="bare").id}
    tokens = make_keys(pg_committing)
    with serving(control_app(pg_url, pg_committing)) as base:
        path = f"{base}/v1/rollouts/{ids['banded']}/rehearsals"
        answer = httpx.post(
            path, json=factories.rehearsal_summary(), headers=bearer(tokens["admin"])
        )
        assert answer.status_code == 201, answer.text
        yield base, tokens, ids, answer.json()


def test_the_rehearsal_curve_sits_beside_the_live_load_bands(browser_page, rehearsed):
    from playwright.sync_api import expect

    page = browser_page
    base, tokens, ids, recorded = rehearsed
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 1000})
    sign_in(page, base, tokens["read"])
    show(page, ids["banded"])
    look = httpx.get(f"{base}/v1/rollouts/{ids['banded']}/glance", headers=bearer(tokens["read"]))
    bands = look.json()["bands"]
    assert bands, "the gate judged loads: the verdict has bands"
    expect(page.locator("#load")).to_be_visible()
    expect(page.locator("#load-bands tbody tr")).to_have_count(len(bands))
    expect(page.locator("#load-bands tbody tr").first).to_contain_text(bands[0][2])
    # The rehearsal: when, against what, its crossovers and the answer at --at, in words.
    expect(page.locator("#rehearsal-sentence")).to_have_text(recorded["sentence"])
    lines = page.locator("#rehearsal-lines li")
    expect(lines).to_have_text(recorded["lines"])
    assert "between 2 and 8" in lines.first.inner_text()
    assert "32 is above the sweep's 8" in lines.last.inner_text()
    # Side by side: the two blocks share a row at this width.
    left = page.locator("#load-bands-section").bounding_box()
    right = page.locator("#rehearsal-section").bounding_box()
    assert left and right and right["x"] > left["x"] + left["width"] - 1 and right["y"] == left["y"]
    page.wait_for_function(DRAWN, arg="chart-rehearsal")
    drawn = page.evaluate(
        "() => Chart.getChart(document.getElementById('chart-rehearsal')).data.datasets"
        ".map((d) => [d.label, d.data.length, (d.intervals || []).length])"
    )
    levels = len(factories.CURVE)
    assert drawn == [
        ["all segments", levels, levels],
        ["copy", levels, levels],
        ["creative", levels, levels],
        ["no gain", 2, 0],
    ]
    ticks = page.evaluate(
        "() => Chart.getChart(document.getElementById('chart-rehearsal')).scales.x.ticks"
        ".map((t) => t.label)"
    )
    assert ticks == ["1", "2", "4", "8", "16", "32"], "log2 axis up to the production level"
    page.locator("#rehearsal-section details summary").click()
    expect(page.locator("#rehearsal-table tbody tr")).to_have_count(len(recorded["rows"]))
    page.locator("#glance").screenshot(path=str(SHOTS / "rehearsal-beside-bands.png"))
    page.screenshot(path=str(SHOTS / "rehearsal-page.png"), full_page=True)

    # A rollout with neither load bands nor a rehearsal shows neither block.
    show(page, ids["bare"])
    expect(page.locator("#load")).to_be_hidden()
    assert page.errors == []


def test_a_real_rehearsal_before_any_live_load_reads_on_its_own(browser_page, rehearsed):
    """The local engines' recorded rehearsal (BENCHMARKS.md), on a rollout with no verdict."""
    from playwright.sync_api import expect

    page = browser_page
    base, tokens, ids, _ = rehearsed
    real = json.loads(REAL.read_text())
    path = f"{base}/v1/rollouts/{ids['bare']}/rehearsals"
    answer = httpx.post(path, json=real, headers=bearer(tokens["admin"]))
    assert answer.status_code == 201, answer.text
    page.set_viewport_size({"width": 1400, "height": 1000})
    sign_in(page, base, tokens["read"])
    show(page, ids["bare"])
    expect(page.locator("#load")).to_be_visible()
    expect(page.locator("#load-bands-none")).to_be_visible()
    expect(page.locator("#load-bands")).to_be_hidden()
    # A summary written before `run_at` existed says when it was recorded instead.
    expect(page.locator("#rehearsal-sentence")).to_contain_text("Recorded ")
    expect(page.locator("#rehearsal-lines li")).to_have_text(
        [
            "Crossover, all segments: above 2; no level up to 8 proven to lose.",
            "Crossover, copy-heavy: none within the sweep (wins at 8).",
            "Crossover, creative: between 1 and 4.",
            "At production concurrency 8: the sweep could not tell.",
        ]
    )
    page.wait_for_function(DRAWN, arg="chart-rehearsal")
    # Every interval fits on the axis (the copy-heavy ones reach 1.74).
    top, bottom = page.evaluate(
        "() => { const y = Chart.getChart(document.getElementById('chart-rehearsal')).scales.y;"
        " return [y.max, y.min]; }"
    )
    bounds = [b for level in real["levels"] for cell in level["segments"].values()
              for b in cell["interval"]]  # fmt: skip
    assert bottom <= min(bounds) and top >= max(bounds)
    page.locator("#glance").screenshot(path=str(SHOTS / "rehearsal-local-engines.png"))
    assert page.errors == []
