"""Reasons in words: the one parser of reason codes, and a sentence per reason family.

Reason codes are parsed here and nowhere else (`parse_reason`; tests/test_layout.py
checks it), so the words follow the gate's codes in one place.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gate.parity import explain
from gate.reports.headline.cells import PARITY_WORDS, label
from gate.reports.headline.facts import Cell
from gate.stats import ids
from gate.stats.ids import ReasonKind
from gate.stats.policy import ALL, Policy


@dataclass(frozen=True)
class ParsedReason:
    """One reason code, parsed: `kind` (decision or `warmup`), `what`, metric, segment."""

    code: str
    kind: str
    what: str
    metric: str | None = None
    segment: str | None = None


def parse_reason(code: str) -> ParsedReason:
    """Parse one reason code of the gate (its grammar is `gate.stats.ids.Reason`)."""
    kind, sep, rest = code.partition(":")
    parsed = ids.Reason.from_code(code)
    if parsed is None:
        return ParsedReason(code, kind, rest if sep else kind)
    if parsed.cell is not None:
        what = "harm" if parsed.kind is ReasonKind.KILL else "unproven"
        return ParsedReason(code, kind, what, str(parsed.cell.metric), parsed.cell.segment)
    if parsed.kind is ReasonKind.COLLAPSE:
        return ParsedReason(code, kind, "collapse", "acceptance", parsed.segment)
    return ParsedReason(code, kind, parsed.detail)


def parity_sentences(cells: Iterable[Cell]) -> list[str]:
    """Return which answer statistic moved and which way, once per harmful parity shift."""
    out: list[str] = []
    for cell in cells:
        if not cell.metric.startswith("parity:") or cell.status != "harmful":
            continue
        if cell.estimate is None:
            continue
        stat = cell.metric.removeprefix("parity:")
        said = explain(stat, 1 if cell.estimate > 0 else -1)
        sentence = f"{said[0].upper()}{said[1:]} ({PARITY_WORDS.get(stat, stat)})."
        if sentence not in out:
            out.append(sentence)
    return out


def reason_sentences(codes: Iterable[str], policy: Policy | None = None) -> list[str]:
    """Return one sentence per reason family, grouped, for people (codes stay for machines)."""
    reasons = [parse_reason(c) for c in codes]
    out: list[str] = []
    groups: dict[str, dict[str, list[str]]] = {}
    for r in reasons:
        if r.metric is not None and r.segment is not None:
            groups.setdefault(r.what, {}).setdefault(r.metric, []).append(r.segment)
            continue
        out.append(plain_reason(r, policy))
    for what, heads in (
        ("harm", "proven harm"),
        ("collapse", "draft acceptance collapsed"),
        ("unproven", "waiting for more data"),
    ):
        by_metric = groups.get(what)
        if not by_metric:
            continue
        count = sum(len(s) for s in by_metric.values())
        listed = "; ".join(f"{label(m)}: {_segments(s, policy)}" for m, s in by_metric.items())
        cells = f"{count} cell{'s' if count != 1 else ''}"
        out.append(f"{heads.capitalize()} in {cells} ({listed}).")
    return out


def _segments(segments: list[str], policy: Policy | None) -> str:
    """Name a few segments; `every segment` when all the policy's are there."""
    if policy is not None and set(segments) >= {ALL, *policy.segments}:
        return "every segment"
    if len(segments) <= 4:
        return ", ".join(segments)
    return ", ".join(segments[:3]) + f" and {len(segments) - 3} more"


def plain_reason(r: ParsedReason, policy: Policy | None) -> str:
    minimum = f" ({policy.min_pairs:,})" if policy else ""
    duration = f" ({format_duration(policy.min_duration_s)})" if policy else ""
    warm = f" ({policy.warmup_pairs:,} pairs)" if policy else ""
    down = f" ({format_duration(policy.max_candidate_down_s)})" if policy else ""
    primary = label(policy.primary.metric) if policy else "primary latency"
    words = {
        "warmup": f"Warming up{warm}: no test runs until warm-up ends.",
        "no_pairs": "No evaluated pairs in this stage yet.",
        "min_pairs": f"Fewer tested pairs than the minimum for promotion{minimum}.",
        "min_duration": f"Younger than the minimum duration{duration}.",
        "gain_unproven": f"The {primary} gain is not proven yet.",
        "dropped_share": "Too many pairs were dropped to trust the comparison.",
        "cohort_imbalance": "The cohorts' shares are off their expected split.",
        "no_baseline_cohort": (
            "This canary stage sends all sampled traffic to the candidate: no baseline"
            " cohort is left to compare with (lower the sample rate)."
        ),
        "max_duration": "No decision within the maximum duration.",
        "candidate_down": (
            "The candidate route did not answer (down, its calls skipped) for longer than"
            f" the policy allows{down}."
        ),
        "load_untested": (
            f"The {primary} gain is proven only at loads well below what promotion brings"
            " to the candidate; promotion waits for evidence nearer that load."
        ),
        "gain_proven": f"The {primary} gain is proven.",
        "guardrails_inside": "Every guardrail is proven within its margin.",
    }
    if r.kind == "alarm" and r.what == "control_exactness":
        return (
            "Data-quality alarm: the baseline's own tokens fail the per-token exactness test; "
            "its logprobs do not describe its sampler (not a kill)."
        )
    if r.kind == "alarm" and r.what.startswith("control_parity:"):
        stat = r.what.removeprefix("control_parity:")
        return (
            f"Data-quality alarm: the control slice (baseline vs baseline) shifted in "
            f"{PARITY_WORDS.get(stat, stat)}; sampled-output parity cannot be trusted (not a kill)."
        )
    return words.get(r.what, f"{r.code.replace('_', ' ')}.")


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 90:
        return "1 min"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.0f} h" if seconds >= 10 * 3600 else f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
