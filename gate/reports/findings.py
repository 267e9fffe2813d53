"""What got worse and what got better: the gate's own tests, as its newest verdict of the
week stored them.

A regression is a guardrail the verdict proved harmful (pooled, or in some segments); an
improvement is one it proved better. Each is said with the same statistic, numbers and
words as the headline (`gate.reports.headline`), so the report and every other surface
give one number per fact. Nothing the gate did not test is claimed: the descriptive
tables (latency quantiles, acceptance week over week, pass rates per arm) stay tables.
"""

from __future__ import annotations

from gate.reports.headline import Grid, GridCell, Headline, Line
from gate.reports.model import Finding, RolloutWeek
from gate.stats.policy import ALL


def compare(weeks: list[RolloutWeek]) -> tuple[list[Finding], list[Finding]]:
    """Return (regressions, improvements) over every rollout's newest verdict of the week."""
    worse: list[Finding] = []
    better: list[Finding] = []
    for week in weeks:
        if week.glance is None:
            continue  # not judged this week: nothing was tested
        head, table = week.glance.headline, week.glance.grid
        worse += [_pooled(week.name, line) for line in head.lines if line.status == "harmful"]
        worse += _in_segments(week.name, head, table)
        better += [_pooled(week.name, line) for line in head.lines if line.status == "better"]
    return worse, better


def _pooled(rollout: str, line: Line) -> Finding:
    return Finding(
        rollout=rollout,
        metric=line.metric,
        segment=ALL,
        text=f"{line.text} ({line.n:,} pairs)",
        estimate=line.estimate,
        interval=line.interval,
        n=line.n,
    )


def _in_segments(rollout: str, head: Headline, table: Grid) -> list[Finding]:
    """Return one finding per guardrail harmful only in some segments, as the headline's
    kill causes name them."""
    pooled = {line.metric for line in head.lines if line.status == "harmful"}
    found = []
    for row in table.rows:
        cells = [c for c in row.cells if c is not None and _harmful_segment(c)]
        if row.metric in pooled or not cells:
            continue
        shown = "; ".join(f"{c.segment} {c.estimate} (95 % CI {c.interval})" for c in cells)
        found.append(
            Finding(
                rollout=rollout,
                metric=row.metric,
                segment=", ".join(c.segment for c in cells),
                text=f"{row.family} · {row.label} harmful in {shown} "
                f"({sum(c.n for c in cells):,} pairs)",
                estimate=cells[0].estimate,
                interval=cells[0].interval,
                n=sum(c.n for c in cells),
            )
        )
    return found


def _harmful_segment(cell: GridCell) -> bool:
    return cell.segment != ALL and cell.status == "harmful"
