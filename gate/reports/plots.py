"""PNG plots of the weekly report, drawn with matplotlib's Agg canvas (no display, no pyplot)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, ScalarFormatter

from gate.rehearse.analysis import ALL
from gate.reports.model import PROBS, Distribution, Event, RolloutWeek, WeeklyReport

WIDTH_PX, HEIGHT_PX, DPI = 960, 480, 100
COLOURS = {"baseline": "#2563eb", "candidate": "#ea580c", "control": "#6b7280"}
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
DECISION_COLOURS = {"continue": "#2563eb", "hold": "#d97706", "promote": "#16a34a"}


def _figure(columns: int = 1) -> tuple[Figure, list[Axes]]:
    figure = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, columns, squeeze=False)[0]
    return figure, list(axes)


def _save(figure: Figure, path: Path) -> Path:
    # No bbox_inches="tight": every PNG keeps exactly WIDTH_PX x HEIGHT_PX.
    figure.savefig(path, dpi=DPI, format="png")
    return path


def _empty(ax: Axes, text: str, title: str) -> None:
    # An empty plot keeps its title and says why it is empty, instead of a blank box.
    ax.set_title(title)
    ax.text(0.5, 0.5, f"no data: {text}", ha="center", va="center", transform=ax.transAxes,
            color="#6b7280", fontsize=12)  # fmt: skip
    ax.set_xticks([])
    ax.set_yticks([])


def draw_all(report: WeeklyReport, out_dir: Path) -> list[Path]:
    """Draw every plot of the report into `out_dir`; return the files."""
    files = [verdict_timeline(report, out_dir / "verdicts.png")]
    previous = str(report.week.previous())
    for week in report.rollouts:
        files.append(latency_cdfs(week, previous, out_dir / f"latency-{week.rollout_id}.png"))
        files.append(acceptance(week, previous, out_dir / f"acceptance-{week.rollout_id}.png"))
        files.append(quality(week, out_dir / f"quality-{week.rollout_id}.png"))
        if week.rehearsal is not None:
            files.append(rehearsal(week, out_dir / f"rehearsal-{week.rollout_id}.png"))
    return files


def _cdf(ax: Axes, arms: dict[str, Distribution], style: str, suffix: str) -> None:
    for cohort, dist in arms.items():
        label = f"{cohort}{suffix} (n={dist.n})"
        ms = [1000 * v for v in dist.grid]
        ax.plot(ms, PROBS, style, color=COLOURS.get(cohort, "black"), label=label)


def latency_cdfs(week: RolloutWeek, previous: str, path: Path) -> Path:
    """Draw TTFT and TPOT CDFs per cohort, this week solid and last week dotted."""
    figure, axes = _figure(2)
    for ax, metric in zip(axes, ("ttft", "tpot"), strict=True):
        now, before = getattr(week.current, metric), getattr(week.previous, metric)
        name = {"ttft": "time to first token", "tpot": "time per output token"}[metric]
        if not now and not before:
            _empty(ax, f"no {metric.upper()} this week", f"{metric.upper()}: {name}")
            continue
        ax.set_title(f"{metric.upper()}: {name}", fontsize=10)
        _cdf(ax, now, "-", "")
        _cdf(ax, before, ":", f" {previous}")
        values = [v for d in [*now.values(), *before.values()] for v in d.grid if v > 0]
        wide = bool(values) and max(values) / min(values) > 30
        if wide:
            ax.set_xscale("log")
            # Decades only: minor-tick labels on a log axis run into each other.
            ax.xaxis.set_major_locator(LogLocator(base=10, numticks=6))
            ax.xaxis.set_minor_formatter(NullFormatter())
        else:
            ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.set_xlabel(f"{metric.upper()} (ms{', log scale' if wide else ''})")
        ax.set_ylabel("fraction of calls")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    figure.suptitle(f"{week.name}: latency CDFs per cohort")
    return _save(figure, path)


def acceptance(week: RolloutWeek, previous: str, path: Path) -> Path:
    """Draw the candidate's acceptance rate per segment, this week beside last week."""
    figure, (ax,) = _figure()
    segments = sorted(set(week.current.acceptance) | set(week.previous.acceptance))
    if not segments:
        _empty(ax, "no speculative counters this week", f"{week.name}: draft acceptance")
        return _save(figure, path)
    xs = list(range(len(segments)))
    for offset, stats, label, colour in (
        (-0.2, week.previous, previous, "#fdba74"),
        (0.2, week.current, "this week", COLOURS["candidate"]),
    ):
        rates = [(a.rate or 0.0) if (a := stats.acceptance.get(s)) else 0.0 for s in segments]
        ax.bar([x + offset for x in xs], rates, width=0.4, label=label, color=colour)
    ax.set_xticks(xs, segments)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accepted / draft tokens")
    ax.set_title(f"{week.name}: draft acceptance by segment")
    ax.legend()
    return _save(figure, path)


def quality(week: RolloutWeek, path: Path) -> Path:
    """Draw candidate minus baseline pass rate per evaluator with 95% intervals."""
    figure, (ax,) = _figure()
    rows = [q for q in week.current.quality if q.delta is not None]
    if not rows:
        _empty(ax, "no evaluations of both arms this week", f"{week.name}: quality deltas")
        return _save(figure, path)
    ys = list(range(len(rows)))
    for y, q in zip(ys, rows, strict=True):
        d = q.delta
        assert d is not None
        colour = "#b91c1c" if d.high < 0 else "#16a34a" if d.low > 0 else "#374151"
        ax.errorbar(
            d.estimate * 100,
            y,
            xerr=[[(d.estimate - d.low) * 100], [(d.high - d.estimate) * 100]],
            fmt="o",
            color=colour,
            capsize=4,
        )
    ax.axvline(0, color="#9ca3af", linestyle="--")
    ax.set_ylim(-1, len(rows))
    ax.set_yticks(ys, [q.evaluator for q in rows])
    ax.set_xlabel("candidate - baseline pass rate (percentage points, 95% CI)")
    ax.set_title(f"{week.name}: quality deltas")
    return _save(figure, path)


def verdict_timeline(report: WeeklyReport, path: Path) -> Path:
    """Draw the week's verdicts per rollout over time, kills as red crosses."""
    figure, (ax,) = _figure()
    names = sorted({e.rollout for e in [*report.verdicts, *report.kills]})
    if not names:
        _empty(ax, "no verdicts or kills this week", f"{report.week}: verdicts and kills")
        return _save(figure, path)
    row = {name: i for i, name in enumerate(names)}
    start = report.week.start

    def hours(events: list[Event]) -> list[float]:
        return [(e.at - start).total_seconds() / 3600 for e in events]

    for decision, colour in DECISION_COLOURS.items():
        events = [e for e in report.verdicts if e.what == decision]
        ax.scatter(
            hours(events),
            [row[e.rollout] for e in events],
            color=colour,
            label=f"verdict {decision}",
            s=25,
        )
    kills = [e for e in report.verdicts if e.what == "kill"] + report.kills
    ax.scatter(
        hours(kills),
        [row[e.rollout] for e in kills],
        color="#b91c1c",
        marker="x",
        s=90,
        label="kill",
    )
    ax.set_xlim(0, 168)
    ax.set_xticks(range(0, 169, 24), [*_DAYS, ""])
    ax.set_xlabel("day of the week (UTC)")
    ax.set_yticks(list(row.values()), list(row))
    ax.set_ylim(-0.5, len(names) - 0.5)
    ax.set_title(f"{report.week}: verdicts and kills")
    ax.legend(fontsize=7, loc="upper left")
    return _save(figure, path)


def rehearsal(week: RolloutWeek, path: Path) -> Path:
    """Draw the recorded rehearsal: speedup against concurrency per segment, with its
    intervals (95 %; with K arms, the lead arm's at 1 - 0.05 / K)."""
    figure, (ax,) = _figure()
    assert week.rehearsal is not None
    for curve in week.rehearsal.curves:
        shown = [p for p in curve.points if p.speedup is not None]
        ys = [p.speedup or 0.0 for p in shown]
        ax.errorbar(
            [p.concurrency for p in shown], ys, capsize=3, marker="o", label=curve.segment,
            yerr=[[y - (p.low or y) for y, p in zip(ys, shown, strict=True)],
                  [(p.high or y) - y for y, p in zip(ys, shown, strict=True)]],
            linewidth=2.5 if curve.segment == ALL else 1.2,
        )  # fmt: skip
    if week.rehearsal.at is not None:
        at = week.rehearsal.at
        ax.axvline(at, color="#6b7280", linestyle=":", label=f"production concurrency {at} (--at)")
    ax.axhline(1.0, color="#9ca3af", linestyle="--")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(ScalarFormatter())  # 1, 2, 4, 8: not 2^0, 2^1, ...
    ax.set_xlabel("concurrent requests (closed loop)")
    ax.set_ylabel("speedup (> 1: candidate faster)")
    level = week.rehearsal.confidence
    ax.set_title(f"{week.name}: rehearsal, speedup vs concurrency ({level} intervals)")
    ax.legend(fontsize=8)
    return _save(figure, path)
