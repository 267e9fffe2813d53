"""The weekly report's findings against SQL: every count matches its bullets and the rows,
each number is the headline's, and nothing is claimed that the gate did not test.

Three rollouts judged by the real gate (faster and fine, failing and killed, too young)
and one with a week of faster-looking traffic the gate never judged.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

from gate.db.base import utcnow
from gate.reports.model import Week
from gate.reports.weekly import build_weekly
from gate.stats.policy import Policy
from tests import factories
from tests.gate.reports import seed
from tests.gate.ui import glance_seed

pytestmark = pytest.mark.postgres
NEWEST = """
    SELECT DISTINCT ON (rollout_id) rollout_id, decision, estimates FROM verdicts
    WHERE created_at >= :start AND created_at < :end
    ORDER BY rollout_id, created_at DESC, id DESC
"""
HARMFUL = f"""
    SELECT count(DISTINCT (n.rollout_id, c->>'metric'))
    FROM ({NEWEST}) n, jsonb_array_elements(n.estimates) c WHERE c->>'status' = 'harmful'
"""
# Proven better, pooled: the primary's upper bound below 1 - its minimum gain, another
# ratio's below 1, a rate's below 0 (acceptance has a floor only).
BETTER = f"""
    SELECT count(*) FROM ({NEWEST}) n, jsonb_array_elements(n.estimates) c
    WHERE c->>'segment' = 'all' AND c->>'status' NOT IN ('harmful', 'idle')
      AND (c->>'n')::int > 0 AND c->>'estimate' IS NOT NULL AND c->>'upper' IS NOT NULL
      AND c->>'metric' <> 'acceptance'
      AND (c->>'upper')::float < CASE
            WHEN c->>'metric' = :primary THEN 1 - :min_gain
            WHEN c->>'metric' IN ('tpot', 'e2e', 'ttft_p50') THEN 1
            ELSE 0 END
"""
EARLY = f"SELECT count(*) FROM ({NEWEST}) n WHERE n.decision = 'continue'"
KILLS = """
    SELECT count(*) FROM audit_events WHERE action = 'kill' AND to_state = 'killed'
      AND created_at >= :start AND created_at < :end
"""


def sections(markdown: str) -> dict[str, tuple[int, list[str]]]:
    """Return each `## Title (n)` section's count and its bullets."""
    out = {}
    for part in markdown.split("\n## ")[1:]:
        title, _, body = part.partition("\n")
        if not title.endswith(")") or " (" not in title:
            continue
        name, _, count = title.rpartition(" (")
        bullets = [line for line in body.splitlines() if line.startswith("- ")]
        out[name] = (int(count.rstrip(")")), [] if bullets == ["- none"] else bullets)
    return out


def test_the_reports_counts_match_sql_and_its_numbers_the_headline(pg_session, tmp_path):
    db = pg_session
    ids = glance_seed.judged(db)
    untested = factories.rollout(db, name="untested")
    quick = seed.Arm(ttft_s=0.12, tpot_s=0.011, acceptance={"chat": 0.6, "code": 0.8})
    seed.traffic(
        db, untested.id, start=utcnow() - timedelta(minutes=40), hours=0.5, pairs=30,
        baseline=seed.Arm(), candidate=quick, seed=3,
    )  # fmt: skip
    week = Week.containing(utcnow())
    report = build_weekly(db, week, out_dir=tmp_path)
    md = report.markdown
    span = {"start": week.start, "end": week.end}
    primary = Policy().primary
    sql = {
        "Regressions": db.scalar(text(HARMFUL), span),
        "Not enough data to call": db.scalar(text(EARLY), span),
        "Improvements": db.scalar(
            text(BETTER), {**span, "primary": primary.metric, "min_gain": primary.min_gain}
        ),
        "Kills": db.scalar(text(KILLS), span),
    }
    found = sections(md)
    for name, want in sql.items():
        count, bullets = found[name]
        assert count == len(bullets) == want, (name, count, bullets, want)
    assert sql["Regressions"] > 0 and sql["Improvements"] > 0 and sql["Kills"] == 1
    assert len(report.regressions) == sql["Regressions"]
    assert len(report.improvements) == sql["Improvements"]
    # Nothing untested is claimed: the rollout the gate never judged has no finding.
    claimed = found["Regressions"][1] + found["Improvements"][1]
    assert not [b for b in claimed if b.startswith("- untested:")]
    assert {f.rollout for f in report.improvements} == {"fast-fine"}
    # One number per fact: the failure gap reads as the headline says it, and only so.
    failing = next(w for w in report.rollouts if w.rollout_id == ids["failing"])
    assert failing.glance is not None
    gap = next(line for line in failing.glance.headline.lines if line.metric == "failures")
    assert f"- failing: {gap.text} ({gap.n:,} pairs)" in found["Regressions"][1]
    row = f"| failures | route failures (error, timeout, fallback) | harmful | {gap.estimate} ["
    assert f"{row}{gap.interval}] |" in md
    # The gate's own kill points at the headline rather than repeating its raw summary.
    (kill,) = found["Kills"][1]
    assert "failing killed by the gate" in kill and "pts [" not in kill
    assert "delta (95% CI)" not in md and "failure rate (errors" not in md
