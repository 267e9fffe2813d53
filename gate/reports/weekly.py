"""The weekly regression report: measure each rollout's week, compare, find, write, store."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from evaluators.registry import code_sandbox
from gate.db.base import utcnow
from gate.db.enums import Cohort, GenerationStatus, Outcome
from gate.db.models import Generation, Rollout, Verdict
from gate.rehearse import repository as rehearsals
from gate.reports import findings, glance, guardrails, plots, queries, rehearsal, render, store
from gate.reports.intervals import newcombe, wilson
from gate.reports.model import (
    PROBS,
    Acceptance,
    Distribution,
    Event,
    Failures,
    Quality,
    RolloutStats,
    RolloutWeek,
    SegmentLatency,
    Week,
    WeeklyReport,
)

KIND = "weekly"


def build_weekly(session: Session, week: str | Week, *, out_dir: Path) -> WeeklyReport:
    """Compute the week's report, write HTML, Markdown and PNGs to `out_dir`, store its row."""
    report = compute_weekly(session, week if isinstance(week, Week) else Week.parse(week))
    write_weekly(report, out_dir)
    row = store.upsert(
        session,
        kind=KIND,
        period=str(report.week),
        markdown=report.markdown,
        location=str(out_dir.resolve()),
        summary=report.summary(),
    )
    report.report_id = row.id
    return report


def compute_weekly(session: Session, week: Week) -> WeeklyReport:
    """Read the week (and the one before) from the database; write nothing."""
    before = week.previous()
    rollouts = queries.active_rollouts(session, since=week.start, until=week.end)
    names = {r.id: r.name for r in rollouts}
    window = queries.Window(None, week.start, week.end)
    verdict_rows = queries.verdicts(session, window)
    recorded = rehearsals.of_rollouts(session, [r.id for r in rollouts])
    weeks = [
        RolloutWeek(
            rollout_id=r.id,
            name=r.name,
            alias=r.alias,
            state=r.state.value,
            current=rollout_stats(session, queries.Window(r.id, week.start, week.end)),
            previous=rollout_stats(session, queries.Window(r.id, before.start, before.end)),
            verdicts=dict(Counter(v.decision.value for v in verdict_rows if v.rollout_id == r.id)),
            sandbox=code_sandbox(r.policy),
            glance=_glance(session, r, verdict_rows, until=week.end),
            guardrails=guardrails.latest_rows(
                [v for v in verdict_rows if v.rollout_id == r.id], r.mode
            ),
            bands=guardrails.latest_bands([v for v in verdict_rows if v.rollout_id == r.id]),
            rehearsal=rehearsal.view(recorded[r.id]) if r.id in recorded else None,
        )
        for r in rollouts
    ]
    verdicts = [
        Event(
            names.get(v.rollout_id, str(v.rollout_id)),
            v.decision.value,
            v.created_at,
            "gate",
            ", ".join(v.reason_codes) or v.summary,
        )
        for v in verdict_rows
    ]
    kills = [
        Event(
            names.get(e.rollout_id or 0, str(e.rollout_id)), "kill", e.created_at, e.actor, e.reason
        )
        for e in queries.state_changes(session, window, actions=("kill",))
        if e.to_state == "killed"
    ]
    regressions, improvements = findings.compare(weeks)
    return WeeklyReport(week, weeks, regressions, improvements, verdicts, kills)


def _glance(
    session: Session, rollout: Rollout, verdicts: list[Verdict], *, until: datetime
) -> glance.Glance | None:
    """Return the answer at a glance of the rollout's newest verdict of the week."""
    mine = [v for v in verdicts if v.rollout_id == rollout.id]
    if not mine:
        return None
    newest = max(mine, key=lambda v: (v.created_at, v.id))
    return glance.of_rollout(
        session, rollout=rollout, verdict=newest, now=min(until, utcnow()), acts_until=until
    )


def write_weekly(report: WeeklyReport, out_dir: Path) -> None:
    """Draw the plots and write `report.html` and `report.md` into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report.files = plots.draw_all(report, out_dir)
    report.markdown = render.markdown(report)
    (out_dir / "report.md").write_text(report.markdown, encoding="utf-8")
    (out_dir / "report.html").write_text(render.html(report), encoding="utf-8")
    report.files += [out_dir / "report.md", out_dir / "report.html"]


def rollout_stats(session: Session, window: queries.Window) -> RolloutStats:
    """Measure one rollout over one window."""
    where = [*queries.generation_filter(window), Generation.status == GenerationStatus.OK]
    ttft, tpot = (
        queries.quantiles(session, value=column, keys=[Generation.cohort], where=where, probs=PROBS)
        for column in (Generation.ttft_s, Generation.tpot_s)
    )
    return RolloutStats(
        ttft={str(k[0]): Distribution(q.n, q.values) for k, q in sorted(ttft.items())},
        tpot={str(k[0]): Distribution(q.n, q.values) for k, q in sorted(tpot.items())},
        acceptance={
            a.segment: Acceptance(a.segment, a.calls, a.draft_tokens, a.accepted_tokens)
            for a in queries.acceptance(session, window)
        },
        quality=_quality(queries.pass_counts(session, window)),
        failures=_failures(queries.status_counts(session, window, step=None)),
        segments=_segments(session, where),
    )


def _segments(session: Session, where: list[Any]) -> dict[str, dict[str, SegmentLatency]]:
    keys = [Generation.segment, Generation.cohort]
    ttft, tpot = (
        queries.quantiles(session, value=column, keys=keys, where=where, probs=(0.5,))
        for column in (Generation.ttft_s, Generation.tpot_s)
    )
    out: dict[str, dict[str, SegmentLatency]] = {}
    for key in sorted(set(ttft) | set(tpot), key=str):
        a, b = ttft.get(key), tpot.get(key)
        out.setdefault(str(key[0]), {})[Cohort(key[1]).value] = SegmentLatency(
            n=max(a.n if a else 0, b.n if b else 0),
            ttft_p50=a.values[0] if a else None,
            tpot_p50=b.values[0] if b else None,
        )
    return out


def _quality(rows: list[queries.PassRow]) -> list[Quality]:
    by_evaluator: dict[str, dict[Cohort, queries.PassRow]] = {}
    for row in rows:
        by_evaluator.setdefault(row.evaluator, {})[row.cohort] = row
    found = []
    for evaluator, arms in sorted(by_evaluator.items()):
        base, cand = arms.get(Cohort.BASELINE), arms.get(Cohort.CANDIDATE)
        baseline = wilson(base.passed, base.n) if base else wilson(0, 0)
        candidate = wilson(cand.passed, cand.n) if cand else wilson(0, 0)
        unjudged = {cohort.value: row.not_evaluable for cohort, row in arms.items()}
        delta = newcombe(candidate, baseline)
        found.append(Quality(evaluator, baseline, candidate, delta, unjudged))
    return found


def _failures(rows: list[queries.StatusRow]) -> dict[str, Failures]:
    counts: dict[str, Counter[GenerationStatus]] = {}
    for row in rows:
        counts.setdefault(row.cohort.value, Counter())[row.status] += row.count
    return {
        cohort: Failures(
            n=sum(c.values()),
            errors=c[GenerationStatus.ERROR] + c[GenerationStatus.TIMEOUT],
            fallbacks=c[GenerationStatus.FALLBACK],
            not_attributable=sum(n for s, n in c.items() if s.outcome is Outcome.NOT_ATTRIBUTABLE),
        )
        for cohort, c in sorted(counts.items())
    }
