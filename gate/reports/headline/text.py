"""The headline and grid as text: plain lines for a terminal, and Markdown."""

from __future__ import annotations

import textwrap

from gate.reports.headline.segment_grid import Grid, GridCell
from gate.reports.headline.summary import Headline

ARMS_TITLE = "Arms (primary metric against the baseline, with the best-arm choice's interval):"
ARM_MARKS = {"killed": "✗", "promoted": "★", "best": "★", "tied": "=", "waiting": "·"}


def text_lines(head: Headline, *, width: int = 100, prefix: str = "") -> list[str]:
    """Return the headline as plain lines no wider than `width` (terminal, logs)."""
    first = f"{prefix}{head.decision_words.upper()}: {head.sentence.split(': ', 1)[-1]}"
    out = _wrap(first, width)
    empty = [line.label for line in head.lines if line.status == "no_data"]
    for line in head.lines:
        if line.status == "no_data":
            continue
        mark = {"harmful": "✗", "unproven": "?", "better": "▲", "inside": "✓"}.get(line.status, "·")
        out += _wrap(f"  {mark} {line.text}", width, indent="      ")
    if empty:
        out += _wrap("  · no data yet: " + ", ".join(empty), width, indent="      ")
    for arm in head.arms:
        out += _wrap(f"  {ARM_MARKS.get(arm.state, '·')} {arm.text}", width, indent="      ")
    for reason in head.reasons:
        out += _wrap(f"  - {reason}", width, indent="    ")
    return out


def markdown(head: Headline, table: Grid | None = None) -> list[str]:
    """Return the headline (and grid, and its evidence) as Markdown lines."""
    out = [f"**{head.sentence}**", ""]
    empty = [line.label for line in head.lines if line.status == "no_data"]
    out += [f"- {line.text}" for line in head.lines if line.status != "no_data"]
    out += [f"- no data yet: {', '.join(empty)}"] if empty else []
    if head.lines:
        out.append("")
    if head.arms:
        out += [ARMS_TITLE, "", *[f"- {arm.text}" for arm in head.arms], ""]
    if head.reasons:
        out += ["Why:", "", *[f"- {reason}" for reason in head.reasons], ""]
    if table and table.rows and not _has_data(table):
        out += ["No guardrail has data yet: the grid fills in once the first test runs.", ""]
    elif table and table.rows:
        out += ["| guardrail | " + " | ".join(table.segments) + " |"]
        out += ["|---|" + "---|" * len(table.segments)]
        for row in table.rows:
            cells = [_md_cell(c) for c in row.cells]
            out.append(f"| {row.label} | " + " | ".join(cells) + " |")
        out += ["", "Evidence (pairs per cell; margin / kill threshold):", ""]
        for row in table.rows:
            shown = [
                f"{c.segment} {c.n} pairs ({c.margin or 'n/a'} / {c.kill_at or 'n/a'})"
                for c in row.cells
                if c is not None and c.n
            ]
            if not shown:
                continue
            out.append(f"- {row.label}: " + "; ".join(shown))
        out.append("")
    return out


def _has_data(table: Grid) -> bool:
    return any(c is not None and c.status != "no_data" for row in table.rows for c in row.cells)


def _md_cell(cell: GridCell | None) -> str:
    if cell is None:
        return "n/a"
    if cell.status == "no_data":
        return "no data"
    # The status in words (Markdown has no colour): **bold** where it is harmful.
    words = f"**{cell.status_words}**" if cell.status == "harmful" else cell.status_words
    return f"{cell.estimate} ({cell.interval}), n={cell.n}, {words}"


def _wrap(text: str, width: int, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, width=width, subsequent_indent=indent, break_on_hyphens=False)
