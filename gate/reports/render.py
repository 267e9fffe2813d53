"""The weekly report as Markdown (the summary) and as one HTML page with its PNG plots."""

from __future__ import annotations

from html import escape

from gate.reports import guardrails
from gate.reports.model import DECISIONS, Event, Finding, RolloutWeek, WeeklyReport

Table = tuple[list[str], list[list[str]]]
NONE = "n/a"


def _ms(value: float | None) -> str:
    return NONE if value is None else f"{value * 1000:.1f} ms"


def _pct(value: float | None) -> str:
    return NONE if value is None else f"{value:.1%}"


def _intro(report: WeeklyReport) -> str:
    week = report.week
    return (
        f"{week.start:%a %Y-%m-%d} to {week.end:%a %Y-%m-%d} (UTC), compared with "
        f"{week.previous()}. {len(report.rollouts)} rollout(s) active, "
        f"{len(report.regressions)} regression(s), {len(report.kills)} kill(s)."
    )


def _finding(f: Finding) -> str:
    return f"{f.rollout}: {f.text}"


def _event(e: Event) -> str:
    why = f": {e.reason}" if e.reason else ""
    return f"{e.at:%a %Y-%m-%d %H:%M} UTC {e.rollout} killed by {e.actor}{why}"


def _verdict_table(report: WeeklyReport) -> Table:
    rows = [[w.name, *(str(w.verdicts.get(d, 0)) for d in DECISIONS)] for w in report.rollouts]
    return ["rollout", *DECISIONS], rows


def _latency_table(week: RolloutWeek) -> Table:
    now = week.current
    rows = []
    for cohort in sorted(set(now.ttft) | set(now.tpot) | set(now.failures)):
        ttft, tpot, fails = now.ttft.get(cohort), now.tpot.get(cohort), now.failures.get(cohort)
        rows.append(
            [
                cohort,
                str(fails.n if fails else 0),
                _ms(ttft.at(0.5) if ttft else None),
                _ms(ttft.at(0.99) if ttft else None),
                _ms(tpot.at(0.5) if tpot else None),
                _ms(tpot.at(0.99) if tpot else None),
                _pct(fails.rate if fails else None),
                str(fails.not_attributable if fails else 0),
            ]
        )
    headers = [
        "cohort", "calls", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
        "route failures", "not attributable",
    ]  # fmt: skip
    return headers, rows


def _acceptance_table(week: RolloutWeek, previous: str) -> Table:
    rows = []
    for segment in sorted(set(week.current.acceptance) | set(week.previous.acceptance)):
        now, then = week.current.acceptance.get(segment), week.previous.acceptance.get(segment)
        rows.append([segment, _pct(now.rate if now else None), _pct(then.rate if then else None)])
    return ["segment", "acceptance this week", f"acceptance {previous}"], rows


def _quality_table(week: RolloutWeek) -> Table:
    rows = []
    for q in week.current.quality:
        d = q.delta
        delta = (
            NONE
            if d is None
            else (f"{d.estimate * 100:+.1f} pts ({d.low * 100:+.1f} to {d.high * 100:+.1f})")
        )
        unjudged = ", ".join(f"{c} {n}" for c, n in sorted(q.not_evaluable.items()) if n)
        rows.append(
            [
                q.evaluator,
                f"{_pct(q.baseline.rate)} of {q.baseline.n}",
                f"{_pct(q.candidate.rate)} of {q.candidate.n}",
                delta,
                unjudged or "0",
            ]
        )
    headers = ["evaluator", "baseline pass", "candidate pass", "delta (95% CI)", "not evaluable"]
    return headers, rows


def _tables(week: RolloutWeek, previous: str) -> list[Table]:
    return [
        _latency_table(week),
        _acceptance_table(week, previous),
        _quality_table(week),
        (guardrails.HEADERS, week.guardrails),
    ]


def _md_table(table: Table) -> list[str]:
    headers, rows = table
    if not rows:
        return []
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return [*lines, ""]


def _md_list(items: list[str]) -> list[str]:
    return [f"- {item}" for item in items] or ["- none"]


def markdown(report: WeeklyReport) -> str:
    """Render the Markdown summary: regressions first."""
    previous = str(report.week.previous())
    lines = [f"# specgate weekly report {report.week}", "", _intro(report), ""]
    lines += [f"## Regressions ({len(report.regressions)})", ""]
    lines += [*_md_list([_finding(f) for f in report.regressions]), ""]
    lines += [f"## Improvements ({len(report.improvements)})", ""]
    lines += [*_md_list([_finding(f) for f in report.improvements]), ""]
    lines += [f"## Kills ({len(report.kills)})", "", *_md_list([_event(e) for e in report.kills])]
    lines += ["", "## Verdicts", "", *_md_table(_verdict_table(report))]
    for week in report.rollouts:
        lines += [f"## {week.name} ({week.alias}), now {week.state}", ""]
        lines += [_weak_sandbox(week), ""] if _weak_sandbox(week) else []
        for table in _tables(week, previous):
            lines += _md_table(table)
    return "\n".join(lines).rstrip() + "\n"


def _html_table(table: Table) -> str:
    headers, rows = table
    if not rows:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html_list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(i)}</li>" for i in items or ["none"]) + "</ul>"


def _img(name: str, alt: str) -> str:
    return f'<img src="{escape(name)}" alt="{escape(alt)}" width="960" height="480">'


_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1000px;margin:2rem auto;color:#1f2937}"
    "table{border-collapse:collapse;margin:.5rem 0 1rem}td,th{border:1px solid #e5e7eb;"
    "padding:.25rem .6rem;text-align:left}.regressions li{color:#991b1b}img{max-width:100%}"
)


def html(report: WeeklyReport) -> str:
    """Render the HTML page; plots are referenced beside it."""
    previous = str(report.week.previous())
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>specgate weekly report {report.week}</title><style>{_STYLE}</style></head><body>",
        f"<h1>specgate weekly report {report.week}</h1><p>{escape(_intro(report))}</p>",
        f"<h2>Regressions ({len(report.regressions)})</h2><div class='regressions'>"
        + _html_list([_finding(f) for f in report.regressions])
        + "</div>",
        f"<h2>Improvements ({len(report.improvements)})</h2>"
        + _html_list([_finding(f) for f in report.improvements]),
        f"<h2>Kills ({len(report.kills)})</h2>" + _html_list([_event(e) for e in report.kills]),
        "<h2>Verdicts</h2>" + _html_table(_verdict_table(report)),
        _img("verdicts.png", "verdicts and kills of the week"),
    ]
    for week in report.rollouts:
        parts.append(
            f"<h2>{escape(week.name)} ({escape(week.alias)}), now {escape(week.state)}</h2>"
        )
        if _weak_sandbox(week):
            parts.append(f"<p><strong>{escape(_weak_sandbox(week))}</strong></p>")
        parts += [_html_table(t) for t in _tables(week, previous)]
        for kind in ("latency", "acceptance", "quality"):
            parts.append(_img(f"{kind}-{week.rollout_id}.png", f"{kind} of {week.name}"))
    return "\n".join([*parts, "</body></html>"]) + "\n"


def _weak_sandbox(week: RolloutWeek) -> str:
    if week.sandbox != "unsafe-local":
        return ""
    return "Code tests ran with sandbox: unsafe-local (no namespaces: weaker isolation)."
