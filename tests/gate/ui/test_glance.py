"""The answer at a glance in real headless Chromium: three rollouts judged by the real gate.

Faster and fine (promoted by the gate's verdict), a candidate that always fails (killed)
and one too young to test. Each headline's words and numbers are checked against the
verdict the gate stored, and a screenshot of each is written to the test's output folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from gate.db.base import utcnow
from gate.reports import headline as words
from gate.reports.model import Week
from gate.reports.weekly import build_weekly
from gate.stats.policy import load_policy
from tests.gate.ui import glance_seed
from tests.gate.ui.harness import bearer, control_app, make_keys
from tests.gate.ui.test_browser import DRAWN, playwright_api, sign_in
from tests.gate.ui.test_browser import page as browser_page
from tests.servers import serving

pytestmark = pytest.mark.postgres
__all__ = ["browser_page", "playwright_api"]  # fixtures shared with the browser test
SHOTS = Path(os.environ.get("SPECGATE_UI_SCREENSHOTS", "test-output/ui-glance"))


@pytest.fixture
def judged(pg_committing, pg_url):
    with pg_committing() as db, db.begin():
        ids = glance_seed.judged(db)
    tokens = make_keys(pg_committing)
    with serving(control_app(pg_url, pg_committing)) as base:
        yield base, tokens, ids


def verdict_of(base: str, token: str, rollout_id: int) -> dict:
    got = httpx.get(f"{base}/v1/rollouts/{rollout_id}/verdicts", headers=bearer(token))
    return got.json()[0]


def policy_of(base: str, token: str, rollout_id: int):
    got = httpx.get(f"{base}/v1/rollouts/{rollout_id}", headers=bearer(token)).json()
    return load_policy(got["policy"])


def show(page, rollout_id: int) -> str:
    """Open one rollout's detail; return the headline as shown."""
    row = page.locator(f"#rollouts tbody tr[data-rollout-id='{rollout_id}']")
    row.locator("button.view").click()
    page.wait_for_function(
        "(id) => document.getElementById('headline').dataset.rollout === String(id)",
        arg=rollout_id,
    )
    return page.locator("#headline").inner_text()


def test_three_rollouts_read_at_a_glance(browser_page, judged):
    from playwright.sync_api import expect

    page = browser_page
    base, tokens, ids = judged
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 1000})
    sign_in(page, base, tokens["read"])
    shown = {}
    for name, rollout_id in ids.items():
        verdict = verdict_of(base, tokens["read"], rollout_id)
        text = show(page, rollout_id)
        shown[name] = (verdict, text)
        # The same module's sentence, from the verdict the gate stored.
        # One line per guardrail with data; those without share one "no data yet" line.
        pooled = [c for c in verdict["estimates"] if c["segment"] == "all"]
        with_data = [c for c in pooled if c["estimate"] is not None and c["n"]]
        lines = page.locator("#headline-lines li")
        expect(lines).to_have_count(len(with_data) + (len(with_data) < len(pooled)))
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)

    fast, fast_text = shown["fast-fine"]
    assert fast["decision"] == "promote"
    tpot = next(c for c in fast["estimates"] if (c["metric"], c["segment"]) == ("tpot", "all"))
    cell = words.Cell.from_json(tpot)
    assert fast_text.startswith("Promote")
    assert f"faster (TPOT {words.format_estimate(cell)}, 95 % CI" in fast_text
    assert words.format_interval(cell) in fast_text
    assert "quality within margins" in fast_text
    assert tpot["upper"] < 0.95  # the gate's own interval proves the gain

    failing, failing_text = shown["failing"]
    assert failing["decision"] == "kill"
    fails = next(
        c for c in failing["estimates"] if (c["metric"], c["segment"]) == ("failures", "all")
    )
    assert failing_text.startswith("Kill")
    assert "the candidate fails more often" in failing_text
    assert f"route failures {words.format_estimate(words.Cell.from_json(fails))}" in failing_text
    assert fails["status"] == "harmful"

    young, young_text = shown["young"]
    assert young["decision"] == "continue" and young["reason_codes"] == ["warmup"]
    policy = policy_of(base, tokens["read"], ids["young"])
    assert young_text.startswith("Continue")
    assert "not enough data yet" in young_text
    needed = policy.warmup_pairs + 1 - glance_seed.KINDS["young"][0]
    assert f"{needed:,} more pairs needed for the first test" in young_text
    # Three different decisions, and three different causes.
    assert len({t.split(":")[0] for _, t in shown.values()}) == 3
    assert page.errors == []


def test_grid_cell_shows_its_evidence_and_reasons_read_as_words(browser_page, judged):
    from playwright.sync_api import expect

    page = browser_page
    base, tokens, ids = judged
    sign_in(page, base, tokens["read"])
    show(page, ids["failing"])
    verdict = verdict_of(base, tokens["read"], ids["failing"])
    chat = next(
        c for c in verdict["estimates"] if (c["metric"], c["segment"]) == ("failures", "chat")
    )
    cell = page.locator("#guardrail-grid tr[data-metric='failures'] td[data-segment='chat']")
    expect(cell).to_have_class("cell harmful")
    cell.click()
    expect(page.locator("#cell-evidence")).to_contain_text(f"{chat['n']} pairs")
    expect(page.locator("#cell-evidence")).to_contain_text("route failures in chat: harmful")
    # Reasons in words, grouped; the codes stay available, folded away.
    reasons = page.locator("#headline-reasons").inner_text()
    assert "Proven harm in" in reasons and "route failures: every segment" in reasons
    assert "kill:failures:all" not in reasons
    expect(page.locator("#headline-codes")).to_contain_text("kill:failures:all")
    # Errors and fallbacks differ by marker, not only by dash; latency reads in ms.
    page.wait_for_function(DRAWN, arg="chart-failures")
    markers = page.evaluate(
        "() => Object.fromEntries(Chart.getChart(document.getElementById('chart-failures'))"
        ".data.datasets.map((d) => [d.label, d.pointStyle]))"
    )
    assert markers["candidate errors"] != markers["candidate fallbacks"]
    axis = page.evaluate(
        "() => Chart.getChart(document.getElementById('chart-ttft')).options.scales.y.title.text"
    )
    assert axis == "ms"
    # The window is the rollout's lifetime: it starts before the first pair, not 6 h ago.
    note = page.locator("#detail-note").inner_text()
    assert " to " in note and "buckets of 1 min" in note
    # A read key sees the kill controls disabled, with the reason.
    kill = page.locator(f"#rollouts tbody tr[data-rollout-id='{ids['young']}'] button.kill")
    expect(kill).to_be_disabled()
    expect(kill).to_have_attribute("title", "Needs a key with the operate scope")
    expect(page.locator("#global-kill")).to_be_disabled()
    assert page.errors == []


def test_the_report_has_the_same_headline_and_grid(browser_page, judged, pg_committing):
    from playwright.sync_api import expect

    page = browser_page
    base, tokens, ids = judged
    with pg_committing() as db, db.begin():
        report = build_weekly(db, Week.containing(utcnow()), out_dir=SHOTS / "report")
    md = report.markdown
    for name, rollout_id in ids.items():
        look = httpx.get(f"{base}/v1/rollouts/{rollout_id}/glance", headers=bearer(tokens["read"]))
        head, grid = look.json()["headline"], look.json()["grid"]
        section = md.split(f"## {name} (")[1].split("\n## ")[0]
        assert f"**{head['sentence']}**" in section
        assert "### Latency per segment (medians)" in section
        # The grid: one row per guardrail, one column per segment, as /ui draws it; a
        # rollout still warming up has none to show, and says so (as /ui does).
        if name == "young":
            assert "No guardrail has data yet" in section
            continue
        assert "| guardrail | " + " | ".join(grid["segments"]) + " |" in section
        for row in grid["rows"]:
            assert f"| {row['label']} | " in section
    # A week too young to call says so, with the pairs seen and needed.
    young = glance_seed.KINDS["young"][0]
    assert "## Not enough data to call (1)" in md and f"- young ({young:,} pairs seen" in md
    assert "Evidence (pairs per cell" in md
    sign_in(page, base, tokens["read"])
    item = page.locator("#report-list li").first
    expect(item).to_contain_text("not enough data to call young")
    item.locator("button").click()
    expect(page.locator("#report-body")).to_contain_text(
        md.split("## fast-fine (")[1].split("**")[1]
    )
    page.locator("#report-body").screenshot(path=str(SHOTS / "report.png"))
    # The HTML page with its plots, as a reader opens it.
    page.goto((SHOTS / "report" / "report.html").resolve().as_uri())
    page.screenshot(path=str(SHOTS / "report-html.png"), full_page=True)
    assert page.errors == []
