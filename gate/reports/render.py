"""The weekly report as Markdown (the summary) and as one HTML page with its PNG plots."""

from __future__ import annotations

from html import escape

from gate.audit import GATE_ACTOR
from gate.reports import guardrails, headline
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
        f"{len(report.regressions)} regression(s), {len(report.improvements)} "
        f"improvement(s), {len(_too_early(report))} too early to call, "
        f"{len(report.kills)} kill(s). Regressions and improvements are what the gate's "
        "newest verdict of the week proved, in the headline's numbers; the tables below "
        "describe the week and test nothing."
    )


def _too_early(report: WeeklyReport) -> list[str]:
    """Say, per rollout the gate could not call yet, the pairs seen and still needed."""
    out = []
    for week in report.rollouts:
        if not week.too_early() or week.glance is None:
            continue
        head = week.glance.headline
        seen = head.pairs_seen if head.pairs_seen is not None else head.n_pairs
        episodes = f", {head.episodes:,} episodes tested" if head.episodes is not None else ""
        out.append(
            f"{week.name} ({seen:,} pairs seen{episodes}, about {head.pairs_needed:,} more needed "
            f"for {head.next_decision})"
        )
    return out


def _sections(report: WeeklyReport) -> list[tuple[str, list[str]]]:
    """Return the findings' sections: each title's count is its number of bullets."""
    early = _too_early(report)
    return [
        (f"Regressions ({len(report.regressions)})", [_finding(f) for f in report.regressions]),
        (f"Not enough data to call ({len(early)})", early),
        (f"Improvements ({len(report.improvements)})", [_finding(f) for f in report.improvements]),
        (f"Kills ({len(report.kills)})", [_event(e) for e in report.kills]),
    ]


def _finding(f: Finding) -> str:
    return f"{f.rollout}: {f.text}"


def _event(e: Event) -> str:
    if e.actor == GATE_ACTOR:
        # The gate's reason is its raw summary, numbers in another rounding: the rollout's
        # headline below says the same in the report's one set of numbers.
        why = ": on its verdict (the rollout's headline below says why)"
        return f"{e.at:%a %Y-%m-%d %H:%M} UTC {e.rollout} killed by the gate{why}"
    reason = e.reason if len(e.reason or "") <= 200 else e.reason[:199] + "…"
    why = f": {reason}" if reason else ""
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
    # Pass rates per arm only: the gap between the arms is the gate's tested number, said
    # once, in the headline's quality lines (a second statistic here would disagree).
    rows = []
    for q in week.current.quality:
        unjudged = ", ".join(f"{c} {n}" for c, n in sorted(q.not_evaluable.items()) if n)
        rows.append(
            [
                q.evaluator,
                f"{_pct(q.baseline.rate)} of {q.baseline.n}",
                f"{_pct(q.candidate.rate)} of {q.candidate.n}",
                unjudged or "0",
            ]
        )
    headers = ["evaluator", "baseline pass", "candidate pass", "not evaluable"]
    return headers, rows


_TITLES = (
    "Latency per cohort",
    "Latency per segment (medians)",
    "Acceptance per segment",
    "Quality per evaluator (every call of the week; the gap is in the quality lines above)",
    "Every declared guardrail, pooled over segments (newest verdict)",
    "Speedup per load band of the candidate (newest verdict; running requests)",
)


def _tables(week: RolloutWeek, previous: str) -> list[Table]:
    return [
        _latency_table(week),
        _segment_table(week),
        _acceptance_table(week, previous),
        _quality_table(week),
        (guardrails.HEADERS, week.guardrails),
        (guardrails.BAND_HEADERS, week.bands),
    ]


def _segment_table(week: RolloutWeek) -> Table:
    rows = []
    for segment, arms in sorted(week.current.segments.items()):
        base, cand = arms.get("baseline"), arms.get("candidate")
        rows.append(
            [
                segment,
                f"{base.n if base else 0} / {cand.n if cand else 0}",
                _ms(base.ttft_p50 if base else None),
                _ms(cand.ttft_p50 if cand else None),
                _ms(base.tpot_p50 if base else None),
                _ms(cand.tpot_p50 if cand else None),
            ]
        )
    headers = [
        "segment", "calls base / spec", "TTFT p50 base", "TTFT p50 spec",
        "TPOT p50 base", "TPOT p50 spec",
    ]  # fmt: skip
    return headers, rows


def _md_glance(week: RolloutWeek) -> list[str]:
    if week.glance is None:
        return ["No verdict this week: the gate did not judge this rollout.", ""]
    return ["### At a glance", "", *headline.markdown(week.glance.headline, week.glance.grid)]


def _html_glance(week: RolloutWeek) -> str:
    if week.glance is None:
        return "<p>No verdict this week: the gate did not judge this rollout.</p>"
    head, grid = week.glance.headline, week.glance.grid
    has_data = any(c is not None and c.status != "no_data" for r in grid.rows for c in r.cells)
    chip = "<span style='background:{};color:#fff;border-radius:4px;padding:0 .4rem'>{}</span>"
    parts = [
        f"<h3>At a glance</h3><p class='headline'><strong>{escape(head.sentence)}</strong></p>"
    ]
    parts.append(
        "<ul>"
        + "".join(
            f"<li>{chip.format(line.colour, escape(line.status_words))} {escape(line.text)}</li>"
            for line in head.lines
        )
        + "</ul>"
    )
    if head.arms:
        parts.append(f"<p>{escape(headline.ARMS_TITLE)}</p>")
        parts.append(_html_list([arm.text for arm in head.arms]))
    if head.reasons:
        parts.append(_html_list(head.reasons))
    if not has_data:
        return "".join([*parts, "<p>No guardrail has data yet.</p>"])
    header = "".join(f"<th>{escape(s)}</th>" for s in ["guardrail", *grid.segments])
    body = []
    for row in grid.rows:
        cells = []
        for c in row.cells:
            if c is None or c.status == "no_data":
                cells.append("<td>no data</td>")
                continue
            cells.append(
                f"<td style='border-left:6px solid {c.colour}' title='{escape(c.status_words)}'>"
                f"{escape(c.estimate)}<br><small>{escape(c.interval)}, n={c.n}</small></td>"
            )
        body.append(f"<tr><th>{escape(row.label)}</th>{''.join(cells)}</tr>")
    parts.append(f"<table><thead><tr>{header}</tr></thead><tbody>{''.join(body)}</tbody></table>")
    return "".join(parts)


def _md_rehearsal(week: RolloutWeek) -> list[str]:
    found = week.rehearsal
    lines = [f"### {headline.REHEARSAL_TITLE}", ""]
    if found is None:
        return [*lines, headline.NO_REHEARSAL, ""]
    lines += [found.sentence, "", *_md_list(found.lines), ""]
    return [*lines, *_md_table((found.headers, found.rows))]


def _html_rehearsal(week: RolloutWeek) -> str:
    found = week.rehearsal
    title = f"<h3>{escape(headline.REHEARSAL_TITLE)}</h3>"
    if found is None:
        return f"{title}<p>{escape(headline.NO_REHEARSAL)}</p>"
    plot = _img(f"rehearsal-{week.rollout_id}.png", f"rehearsal of {week.name}")
    return (
        f"{title}<p>{escape(found.sentence)}</p>{_html_list(found.lines)}"
        f"{_html_table((found.headers, found.rows))}{plot}"
    )


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
    for title, items in _sections(report):
        lines += [f"## {title}", "", *_md_list(items), ""]
    lines += ["## Verdicts", "", *_md_table(_verdict_table(report))]
    for week in report.rollouts:
        lines += [f"## {week.name} ({week.alias}), now {week.state}", ""]
        lines += [_weak_sandbox(week), ""] if _weak_sandbox(week) else []
        lines += _md_glance(week)
        for title, table in zip(_TITLES, _tables(week, previous), strict=True):
            rows = _md_table(table)
            lines += [f"### {title}", "", *(rows or ["No data this week.", ""])]
        lines += _md_rehearsal(week)
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
        *(
            f"<h2>{escape(title)}</h2><div class='{title.split()[0].lower()}'>"
            + _html_list(items)
            + "</div>"
            for title, items in _sections(report)
        ),
        "<h2>Verdicts</h2>" + _html_table(_verdict_table(report)),
        _img("verdicts.png", "verdicts and kills of the week"),
    ]
    for week in report.rollouts:
        parts.append(
            f"<h2>{escape(week.name)} ({escape(week.alias)}), now {escape(week.state)}</h2>"
        )
        if _weak_sandbox(week):
            parts.append(f"<p><strong>{escape(_weak_sandbox(week))}</strong></p>")
        parts.append(_html_glance(week))
        for title, table in zip(_TITLES, _tables(week, previous), strict=True):
            shown = _html_table(table) or "<p>No data this week.</p>"
            parts.append(f"<h3>{escape(title)}</h3>{shown}")
        parts.append(_html_rehearsal(week))
        for kind in ("latency", "acceptance", "quality"):
            parts.append(_img(f"{kind}-{week.rollout_id}.png", f"{kind} of {week.name}"))
    return "\n".join([*parts, "</body></html>"]) + "\n"


def _weak_sandbox(week: RolloutWeek) -> str:
    if week.sandbox != "unsafe-local":
        return ""
    return "Code tests ran with sandbox: unsafe-local (no namespaces: weaker isolation)."
