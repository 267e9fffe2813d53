"""The weekly report on seeded Postgres: its numbers match the rows, its plots are real PNGs."""

from __future__ import annotations

import struct
from datetime import timedelta

import numpy as np
import pytest
from matplotlib import image
from sqlalchemy import func, select

from gate.db.enums import Decision
from gate.db.models import Report, Rollout
from gate.rehearse import service
from gate.rehearse.schemas import RehearsalIn
from gate.reports import headline as words
from gate.reports.model import Week
from gate.reports.plots import HEIGHT_PX, WIDTH_PX
from gate.reports.weekly import build_weekly
from gate.rollouts.states import Action
from tests import factories
from tests.gate.reports import seed

pytestmark = pytest.mark.postgres
WEEK = Week.parse("2026-W40")
BEFORE = WEEK.previous()


@pytest.fixture
def seeded(pg_session):
    """Rollout 'slow' regresses in W40; 'fast' improves and is killed; 'old' is W38 only."""
    db = pg_session
    slow = factories.rollout(db, name="slow")
    fast = factories.rollout(db, name="fast")
    old = factories.rollout(db, name="old")
    good = seed.Arm(acceptance={"chat": 0.5, "code": 0.7})
    records = seed.traffic(
        db,
        slow.id,
        start=BEFORE.start,
        hours=150,
        pairs=300,
        baseline=seed.Arm(),
        candidate=good,
        seed=1,
    )
    bad = seed.Arm(
        ttft_s=0.3,
        fail=0.15,
        passes={"groundedness": 0.9, "schema": 0.6},
        acceptance={"chat": 0.5, "code": 0.35},
    )
    records += seed.traffic(
        db,
        slow.id,
        start=WEEK.start,
        hours=150,
        pairs=400,
        baseline=seed.Arm(),
        candidate=bad,
        seed=2,
    )
    quick = seed.Arm(ttft_s=0.12, tpot_s=0.011, acceptance={"chat": 0.6, "code": 0.8})
    records += seed.traffic(
        db,
        fast.id,
        start=WEEK.start + timedelta(days=1),
        hours=48,
        pairs=250,
        baseline=seed.Arm(),
        candidate=quick,
        seed=3,
    )
    records += seed.traffic(
        db,
        old.id,
        start=BEFORE.start - timedelta(days=7),
        hours=24,
        pairs=30,
        baseline=seed.Arm(),
        candidate=good,
        seed=4,
    )
    at = WEEK.start + timedelta(days=2)
    for hours in (1, 5, 9):
        seed.verdict(db, slow.id, Decision.CONTINUE, at + timedelta(hours=hours), "need_more")
    seed.verdict(db, slow.id, Decision.CONTINUE, BEFORE.start + timedelta(days=1))
    seed.verdict(db, fast.id, Decision.CONTINUE, at, "need_more")
    seed.verdict(db, fast.id, Decision.KILL, at + timedelta(hours=2), "acceptance_collapse")
    seed.act(db, fast.id, Action.START, WEEK.start + timedelta(hours=20), "go")
    seed.act(db, fast.id, Action.KILL, at + timedelta(hours=3), "acceptance collapsed in code")
    return db, records, {"slow": slow.id, "fast": fast.id, "old": old.id}


def expected_stats(records, rollout_id, week):
    mine = [
        r for r in records if r.rollout_id == rollout_id and week.start <= r.started_at < week.end
    ]
    ok = [r for r in mine if r.status == "ok"]
    out = {"latency": {}, "acceptance": {}, "quality": {}, "failures": {}}
    for metric in ("ttft", "tpot"):
        out["latency"][metric] = {}
        for cohort in ("baseline", "candidate"):
            values = [getattr(r, f"{metric}_s") for r in ok if r.cohort == cohort]
            if values:
                out["latency"][metric][cohort] = {
                    "n": len(values),
                    **{
                        k: float(np.quantile(values, p))
                        for k, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
                    },
                }
    for segment in seed.SEGMENTS:
        cand = [r for r in ok if r.cohort == "candidate" and r.segment == segment]
        if cand:
            drafted = sum(r.draft_tokens for r in cand)
            accepted = sum(r.accepted for r in cand)
            out["acceptance"][segment] = {"draft_tokens": drafted, "rate": accepted / drafted}
    for name in seed.EVALUATORS if mine else ():
        out["quality"][name] = {}
        for cohort in ("baseline", "candidate"):
            # A call no route is answerable for has no evaluations at all.
            results = [r.evaluations[name] for r in mine if r.cohort == cohort and r.evaluations]
            arm = [p for p in results if p is not None]
            out["quality"][name][cohort] = (sum(arm), len(arm), len(results) - len(arm))
    for cohort in ("baseline", "candidate") if mine else ():
        arm = [r for r in mine if r.cohort == cohort]
        lost = sum(r.status in ("dropped", "cancelled") for r in arm)
        failed = sum(r.status in ("error", "timeout", "fallback") for r in arm)
        out["failures"][cohort] = (failed, len(arm), lost)
    return out


def check_stats(got, want):
    for metric, arms in want["latency"].items():
        assert set(got["latency"][metric]) == set(arms)
        for cohort, numbers in arms.items():
            assert got["latency"][metric][cohort] == pytest.approx(numbers, rel=1e-9)
    assert set(got["acceptance"]) == set(want["acceptance"])
    for segment, numbers in want["acceptance"].items():
        assert got["acceptance"][segment]["draft_tokens"] == numbers["draft_tokens"]
        assert got["acceptance"][segment]["rate"] == pytest.approx(numbers["rate"], rel=1e-12)
    assert set(got["quality"]) == set(want["quality"])
    assert set(got["failures"]) == set(want["failures"])
    for name, arms in want["quality"].items():
        for cohort, (passed, n, unjudged) in arms.items():
            assert (got["quality"][name][cohort]["k"], got["quality"][name][cohort]["n"]) == (
                passed,
                n,
            )
            assert got["quality"][name]["not_evaluable"].get(cohort, 0) == unjudged
    for cohort, (failed, n, lost) in want["failures"].items():
        assert got["failures"][cohort]["n"] == n
        assert got["failures"][cohort]["not_attributable"] == lost
        assert got["failures"][cohort]["rate"] == pytest.approx(failed / (n - lost))


def test_numbers_match_the_database(seeded, tmp_path):
    db, records, ids = seeded
    report = build_weekly(db, "2026-W40", out_dir=tmp_path)
    summary = report.summary()
    by_name = {r["name"]: r for r in summary["rollouts"]}
    assert set(by_name) == {"slow", "fast"}, "a rollout idle all week is left out"
    for name in ("slow", "fast"):
        check_stats(by_name[name]["current"], expected_stats(records, ids[name], WEEK))
        check_stats(by_name[name]["previous"], expected_stats(records, ids[name], BEFORE))
    assert by_name["slow"]["verdicts"] == {"continue": 3}
    assert by_name["fast"]["verdicts"] == {"continue": 1, "kill": 1}
    assert summary["verdicts"]["counts"] == {"continue": 4, "kill": 1}
    assert [(k["rollout"], k["actor"], k["reason"]) for k in summary["kills"]] == [
        ("fast", "key:ops", "acceptance collapsed in code")
    ]


def test_a_rollout_whose_code_ran_without_the_sandbox_says_so(seeded, tmp_path):
    db, _records, ids = seeded
    db.get(Rollout, ids["slow"]).policy = {"sandbox": "unsafe-local"}
    db.flush()
    report = build_weekly(db, "2026-W40", out_dir=tmp_path)
    slow = report.markdown.split("## slow")[1].split("## fast")[0]
    assert (
        "sandbox: unsafe-local" in slow
        and "sandbox: unsafe-local" not in report.markdown.split("## slow")[0]
    )
    assert "unsafe-local" in (tmp_path / "report.html").read_text()


def test_changes_the_gate_did_not_test_are_described_not_claimed(seeded, tmp_path):
    db, _records, _ids = seeded
    report = build_weekly(db, "2026-W40", out_dir=tmp_path)
    # The seeded verdicts carry no cells: the gate proved nothing, so nothing is claimed,
    # however slow or fast the week's calls look (the tables still show them).
    assert report.regressions == [] and report.improvements == []
    md = (tmp_path / "report.md").read_text()
    assert "## Regressions (0)" in md and "## Improvements (0)" in md
    order = ["## Regressions", "## Not enough data to call", "## Improvements", "## Kills"]
    assert [md.index(title) for title in order] == sorted(md.index(title) for title in order)
    slow = md.split("## slow")[1].split("## fast")[0]
    acceptance = slow.split("### Acceptance per segment")[1].split("###")[0]
    assert "| code |" in acceptance, "the week's acceptance drop is still shown"
    assert "fast killed by key:ops: acceptance collapsed in code" in md
    html = (tmp_path / "report.html").read_text()
    assert html.index("Regressions") < html.index("Improvements")


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_plots_are_real_images_of_the_right_size(seeded, tmp_path):
    db, _records, ids = seeded
    build_weekly(db, "2026-W40", out_dir=tmp_path)
    names = {"verdicts.png"} | {
        f"{kind}-{ids[r]}.png"
        for kind in ("latency", "acceptance", "quality")
        for r in ("slow", "fast")
    }
    assert {p.name for p in tmp_path.glob("*.png")} == names
    for name in names:
        path = tmp_path / name
        assert png_size(path) == (WIDTH_PX, HEIGHT_PX)
        pixels = image.imread(path)[..., :3].reshape(-1, 3)
        colours = np.unique((pixels * 255).astype(int), axis=0)
        assert len(colours) > 50, f"{name} looks blank"
        assert (pixels.mean(axis=1) < 0.9).mean() > 0.005, f"{name} has too little ink"
    for name in names:
        assert f'src="{name}"' in (tmp_path / "report.html").read_text()


def test_generating_again_updates_the_stored_row(seeded, tmp_path):
    db, _records, _ids = seeded
    first = build_weekly(db, "2026-W40", out_dir=tmp_path / "a")
    second = build_weekly(db, "2026-W40", out_dir=tmp_path / "b")
    assert first.report_id == second.report_id
    assert db.scalar(select(func.count()).select_from(Report)) == 1
    row = db.get(Report, first.report_id)
    assert (row.kind, row.period) == ("weekly", "2026-W40")
    assert row.location == str((tmp_path / "b").resolve())
    assert row.markdown == (tmp_path / "b" / "report.md").read_text()
    assert row.summary["regressions"] == second.summary()["regressions"]


def test_an_empty_week_still_writes_a_report(pg_session, tmp_path):
    report = build_weekly(pg_session, "2026-W02", out_dir=tmp_path)
    assert report.rollouts == [] and report.regressions == []
    assert png_size(tmp_path / "verdicts.png") == (WIDTH_PX, HEIGHT_PX)
    assert "## Regressions (0)" in (tmp_path / "report.md").read_text()


def test_not_evaluable_results_and_unattributable_calls_stay_out_of_the_rates(pg_session, tmp_path):
    db = pg_session
    rollout = factories.rollout(db, name="lossy")
    lossy = seed.Arm(fail=0.1, lost=0.2, unjudged=0.3, acceptance={"chat": 0.5, "code": 0.6})
    records = seed.traffic(
        db, rollout.id, start=WEEK.start, hours=50, pairs=200,
        baseline=seed.Arm(), candidate=lossy, seed=9,
    )  # fmt: skip
    report = build_weekly(db, "2026-W40", out_dir=tmp_path)
    (got,) = report.summary()["rollouts"]
    want = expected_stats(records, rollout.id, WEEK)
    assert want["failures"]["candidate"][2] > 0 and want["quality"]["schema"]["candidate"][2] > 0
    check_stats(got["current"], want)
    assert "not evaluable" in report.markdown and "not attributable" in report.markdown


def test_a_recorded_rehearsal_shows_its_curve_beside_the_load_bands(seeded, tmp_path):
    db, _records, ids = seeded
    summary = factories.rehearsal_summary()
    service.record(db, rollout_id=ids["slow"], rehearsal=RehearsalIn(**summary), actor="ci")
    report = build_weekly(db, "2026-W40", out_dir=tmp_path)
    slow = report.markdown.split("## slow")[1].split("## fast")[0]
    bands = slow.index("### Speedup per load band")
    curve = slow.index(f"### {words.REHEARSAL_TITLE}")
    assert bands < curve, "the rehearsal follows the live load bands"
    assert "Rehearsed 2026-11-20 09:30 UTC: baseline http://plain:8001/v1 against candidate" in slow
    assert "workload built-in workload (40 requests), 1 to 8 concurrent requests." in slow
    assert "- Crossover, all segments: between 2 and 8." in slow
    assert "- Crossover, creative: could not tell (no level proven to win or to lose)." in slow
    at = "- At production concurrency 32: the sweep could not tell (32 is above the sweep's 8)."
    assert at in slow
    # One table row per segment and level, the numbers as the summary gave them.
    for concurrency, speed, low, high, call in factories.CURVE:
        said = {"wins": "candidate faster", "loses": "candidate slower"}.get(call, call)
        row = f"| all | {concurrency} | {speed:.2f} [{low:.2f}, {high:.2f}] | {said} |"
        assert row.replace("unclear", "could not tell") in slow
    assert "| creative | 8 | 0.95 [0.80, 1.10] | could not tell |" in slow
    fast = report.markdown.split("## fast")[1]
    assert "No rehearsal recorded for this rollout (`specgate rehearse --rollout ID`)." in fast
    stored = {r["name"]: r["rehearsal"] for r in report.summary()["rollouts"]}
    assert stored["fast"] is None and stored["slow"]["at"] == 32
    plot = tmp_path / f"rehearsal-{ids['slow']}.png"
    assert png_size(plot) == (WIDTH_PX, HEIGHT_PX)
    assert f'src="{plot.name}"' in (tmp_path / "report.html").read_text()


def test_a_weeks_headline_leads_with_that_weeks_kill_not_a_later_resume(seeded, tmp_path):
    db, _records, ids = seeded
    seed.act(db, ids["fast"], Action.RESUME, WEEK.end + timedelta(days=3), "fixed")
    report = build_weekly(db, "2026-W40", out_dir=tmp_path)
    at = WEEK.start + timedelta(days=2, hours=3)
    fast = report.summary()["headlines"]["fast"]
    assert fast.startswith(
        f'Killed: by key:ops at {at:%Y-%m-%d %H:%M} UTC, because "acceptance collapsed in code". '
        "The gate's latest view: Kill"
    ), fast
    assert report.summary()["headlines"]["slow"].startswith("Continue")


def test_a_rollout_with_arms_lists_its_arms_and_the_winner(pg_session, tmp_path):
    from gate.db.base import utcnow
    from tests.gate.ui import glance_seed

    rollout_id = glance_seed.armed(pg_session)
    report = build_weekly(pg_session, str(Week.containing(utcnow())), out_dir=tmp_path)
    week = next(w for w in report.rollouts if w.rollout_id == rollout_id)
    head = week.glance.headline
    assert head.winner == "k4"
    assert head.sentence.startswith("Promote: arm 'k4' is the best arm and its own gate promotes")
    assert "killed on its own: arm 'k8' (harm proven in task)" in head.sentence
    listed = [line for line in report.markdown.splitlines() if line.startswith("- arm ")]
    assert [line.split(" (")[0] for line in listed] == ["- arm k4", "- arm k8", "- arm k2"]
    assert listed[0].startswith(f"- arm k4 (winner): TPOT {words.MINUS}")
    assert "(killed): " in listed[1] and listed[1].endswith(": harm proven in task")
    html = (tmp_path / "report.html").read_text()
    assert "<p>Arms (primary metric" in html and "<li>arm k2 (running): TPOT " in html
