"""The rehearsal's summary: a JSON document, its Markdown rendering and a speedup plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI runners
import matplotlib.pyplot as plt

from gate.rehearse import arms
from gate.rehearse.analysis import (
    ALL,
    ALPHA,
    Call,
    confidence,
    crossover,
    level_call,
    percentiles,
    speedup,
)
from gate.rehearse.runner import Route, Sample
from gate.rehearse.sweep import Level
from gate.rehearse.workload import Workload


def summarise(
    routes: tuple[Route, Route],
    workload: Workload,
    levels: list[Level],
    budget_s: float,
    *,
    alpha: float = ALPHA,
) -> dict[str, Any]:
    """Return the JSON summary: per level and segment, both routes and the speedup (its
    interval at `alpha`)."""
    segments = [ALL, *sorted({item.segment for item in workload.items})]
    rows = [_level(routes, level, segments, alpha) for level in levels]
    concurrency = [level.concurrency for level in levels]
    return {
        "routes": {"baseline": routes[0].base_url, "candidate": routes[1].base_url},
        "workload": {
            "source": workload.source,
            "requests": len(workload.items),
            "skipped_cut_prompt": workload.cut,
            "skipped_without_body": workload.without_body,
        },
        "budget_s": budget_s,
        "elapsed_s": round(sum(level.elapsed_s for level in levels), 1),
        "speedup": "baseline e2e seconds per output token / candidate's (> 1: candidate faster)",
        "interval_alpha": alpha,
        "levels": rows,
        "crossover": {
            segment: vars(
                crossover(concurrency, [row["segments"][segment]["call"] for row in rows])
            )
            for segment in segments
        },
    }


def _level(
    routes: tuple[Route, Route], level: Level, segments: list[str], alpha: float
) -> dict[str, Any]:
    base_name, cand_name = (r.name for r in routes)
    by_segment: dict[str, Any] = {}
    for segment in segments:
        base = [s for s in level.samples(base_name) if segment in (ALL, s.segment)]
        cand = [s for s in level.samples(cand_name) if segment in (ALL, s.segment)]
        value = speedup(base, cand, alpha=alpha)
        by_segment[segment] = {
            "speedup": None if value is None else round(value.estimate, 4),
            "interval": None if value is None else [round(value.low, 4), round(value.high, 4)],
            "call": level_call(base, cand, alpha=alpha),
            "baseline": _route(base),
            "candidate": _route(cand),
        }
    roles = list(zip(("baseline", "candidate"), routes, strict=True))
    return {
        "concurrency": level.concurrency,
        "stopped": level.stop,
        "elapsed_s": round(level.elapsed_s, 1),
        # The requests in flight, time-averaged over the windows each route was measured in.
        "concurrency_reached": {role: round(level.reached(r.name), 2) for role, r in roles},
        "tokens_per_s": {role: _throughput(level, r.name) for role, r in roles},
        "segments": by_segment,
    }


def _throughput(level: Level, route: str) -> float:
    """Return output tokens per second at the held load: by Little's law, requests in
    flight over their mean latency, times tokens per request."""
    samples = level.samples(route)
    seconds = sum(s.e2e_s for s in samples)
    return round(level.reached(route) * _tokens(samples) / seconds, 2) if seconds else 0.0


def _route(samples: list[Sample]) -> dict[str, Any]:
    ok = [s for s in samples if s.ok]
    drafted = sum(s.drafted for s in ok)
    return {
        "requests": len(samples),
        "errors": len(samples) - len(ok),
        "ttft_s": percentiles([s.ttft_s for s in ok]),
        "tpot_s": percentiles([t for s in ok if (t := s.tpot_s) is not None]),
        "e2e_s": percentiles([s.e2e_s for s in ok]),
        "output_tokens": _tokens(ok),
        "acceptance": round(sum(s.accepted for s in ok) / drafted, 4) if drafted else None,
    }


def _tokens(samples: list[Sample]) -> int:
    return sum(s.tokens for s in samples if s.ok)


def markdown(summary: dict[str, Any], *, at: int | None, decision: str) -> str:
    """Render the summary as Markdown: one table per segment, the crossover under it."""
    lead = f" (lead arm {summary['lead']})" if summary.get("lead") else ""
    shown = confidence(summary.get("interval_alpha", ALPHA))  # K arms: 1 - 0.05 / K
    lines = [
        "# specgate rehearsal",
        "",
        f"Baseline {summary['routes']['baseline']}, candidate {summary['routes']['candidate']}"
        f"{lead}; "
        f"workload {summary['workload']['source']} ({summary['workload']['requests']} requests, "
        f"{summary['workload']['skipped_cut_prompt']} skipped with a cut prompt); "
        f"{summary['elapsed_s']} s of a {summary['budget_s']:.0f} s budget.",
        "",
        f"Speedup: {summary['speedup']}; {shown} bootstrap intervals.",
        "",
        f"Decision{f' at concurrency {at}' if at else ''}: **{decision}**.",
    ]
    for segment, cross in summary["crossover"].items():
        lines += ["", f"## {segment}", "", f"| concurrency | speedup | {shown} interval | call | "
                  "in flight | baseline / candidate e2e p50 (s) | TTFT p50 (s) | TPOT p50 (ms) | "
                  "acceptance | errors |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for row in summary["levels"]:
            lines.append(_row(row, row["segments"][segment]))
        lines += ["", f"Crossover: {cross['text']}."]
    if summary.get("exactness"):
        lines += ["", "## Exactness", "", *(f"- {line}" for line in
                                              exactness_lines(summary["exactness"]))]  # fmt: skip
    if summary.get("arms"):  # the tables above are the lead arm's
        lines += ["", "## Arms", "", *(f"- {line}" for line in arms.lines(summary))]
        for arm in summary["arms"]:
            lines += [f"- arm {arm['name']}: {line}"
                      for line in exactness_lines(arm["exactness"])]  # fmt: skip
    return "\n".join(lines) + "\n"


def exactness_lines(section: dict[str, Any] | None) -> list[str]:
    """Return the exactness phase's result in words, one line per finding."""
    if not section:
        return []
    cand, base = section["candidate"], section["baseline"]
    how = (f"{cand['answers']} sampled answers at temperature {section['temperature']:g}, "
           f"{section['logprobs_mode']} logprobs, alpha {section['alpha']:g}")  # fmt: skip
    lines = [f"candidate {cand['text']} ({how})", f"baseline (the control) {base['text']}"]
    if section["control_alarm"]:
        lines.append("WARNING data quality: the baseline fails the same test, so the "
                     "logprobs do not describe what the routes sample (check --logprobs-mode); "
                     "the candidate's result is not used")  # fmt: skip
    elif cand["status"] == "deviates" and section["lossy"]:
        lines.append("the policy declares the candidate lossy: reported, not failed on")
    elif section["failed"]:
        lines.append("the candidate is not exact: exit 3")
    lines.append(section["greedy_parity"]["text"])
    return lines


def _row(row: dict[str, Any], cell: dict[str, Any]) -> str:
    b, c = cell["baseline"], cell["candidate"]
    held = row.get("concurrency_reached") or {}
    flight = " / ".join(
        f"{held[role]:.1f}" if role in held else "—" for role in ("baseline", "candidate")
    )
    interval = "n/a" if cell["interval"] is None else "[{:.2f}, {:.2f}]".format(*cell["interval"])
    speed = "n/a" if cell["speedup"] is None else f"{cell['speedup']:.2f}"
    acc = "—" if c["acceptance"] is None else f"{c['acceptance']:.2f}"
    return (
        f"| {row['concurrency']} | {speed} | {interval} | {cell['call'] or 'n/a'} | {flight} | "
        f"{_p(b, 'e2e_s')} / {_p(c, 'e2e_s')} | {_p(b, 'ttft_s')} / {_p(c, 'ttft_s')} | "
        f"{_p(b, 'tpot_s', 1000)} / {_p(c, 'tpot_s', 1000)} | {acc} | "
        f"{b['errors']} / {c['errors']} |"
    )


def _p(route: dict[str, Any], metric: str, scale: float = 1.0) -> str:
    value = route[metric].get("p50")
    return "—" if value is None else f"{value * scale:.3g}"


def plot(summary: dict[str, Any], path: Path) -> None:
    """Draw speedup against concurrency, one line per segment (per arm, segment `all`, for
    several arms), with the intervals."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    curves = [(segment, summary["levels"], segment) for segment in summary["crossover"]]
    if summary.get("arms"):
        curves = [(arm["name"], arm["levels"], ALL) for arm in summary["arms"]]
    for label, levels, segment in curves:
        points = [
            (row["concurrency"], row["segments"][segment])
            for row in levels
            if row["segments"][segment]["speedup"] is not None
        ]
        if not points:
            continue
        xs = [x for x, _ in points]
        ys = [cell["speedup"] for _, cell in points]
        low = [y - cell["interval"][0] for y, (_, cell) in zip(ys, points, strict=True)]
        high = [cell["interval"][1] - y for y, (_, cell) in zip(ys, points, strict=True)]
        ax.errorbar(xs, ys, yerr=[low, high], marker="o", capsize=3, label=label,
                    linewidth=2.5 if label == ALL else 1.2)  # fmt: skip
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent requests (closed loop)")
    ax.set_ylabel("speedup (baseline / candidate s per token)")
    shown = confidence(summary.get("interval_alpha", ALPHA))
    ax.set_title(f"specgate rehearsal: speedup vs concurrency ({shown} intervals)")
    if ax.get_legend_handles_labels()[0]:  # no speedup anywhere: nothing to name
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def calls(summary: dict[str, Any], segment: str = ALL) -> list[Call | None]:
    """Return the per-level calls of one segment."""
    return [row["segments"][segment]["call"] for row in summary["levels"]]
