"""The answer at a glance: one rollout's headline, guardrail grid and reasons in words.

Every surface (`/ui`, the weekly report, `specgate rollout show`, the end of `specgate
demo`) calls this module, so they all say the same thing. The input is a verdict as the
gate stores it (decision, reason codes, per-cell estimates as JSON) plus the rollout's
policy and its pace; nothing here queries. Reason codes are parsed here and nowhere else
(`parse_reason`), so the words can follow the gate's codes in one place.

Cells read as the gate writes them (`gate.stats.verdict.CellResult`): latency metrics as
candidate/baseline ratios, rates as candidate minus baseline, acceptance as the mean
per-request acceptance. `lower` is the bound at the kill level, `upper` at promotion's.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from gate.parity import explain
from gate.stats.policy import ALL, Policy

Status = Literal["better", "inside", "unproven", "harmful", "no_data", "not_gating"]
STATUS_WORDS: dict[str, str] = {
    "better": "proven better",
    "inside": "within margin",
    "unproven": "unproven",
    "harmful": "harmful",
    "no_data": "no data",
    "not_gating": "not gating yet",
}
# One colour per status, shared by /ui (CSS) and the report (HTML).
STATUS_COLOURS: dict[str, str] = {
    "better": "#15803d",
    "inside": "#65a30d",
    "unproven": "#a16207",
    "harmful": "#b91c1c",
    "no_data": "#6b7280",
    "not_gating": "#6b7280",
}
DECISION_WORDS = {
    "continue": "Continue",
    "promote": "Promote",
    "kill": "Kill",
    "hold": "Hold",
}
# Signed numbers use the minus sign, not a hyphen.
MINUS = "\N{MINUS SIGN}"
RATIOS = ("tpot", "e2e", "ttft_p50")
LABELS = {
    "tpot": "TPOT",
    "e2e": "end-to-end latency",
    "ttft_p50": "TTFT",
    "ttft_tail": "TTFT tail",
    "e2e_tail": "end-to-end tail",
    "acceptance": "draft acceptance",
    "failures": "route failures",
    "cancels": "client cancels",
    "feedback": "thumbs-down",
    "greedy_mismatch": "greedy parity",
}
FAMILIES = {
    "tpot": "latency",
    "e2e": "latency",
    "ttft_p50": "latency",
    "ttft_tail": "latency",
    "e2e_tail": "latency",
    "acceptance": "acceptance",
    "failures": "failures",
    "cancels": "failures",
    "feedback": "quality",
    "greedy_mismatch": "parity",
}
# The order kill causes are named in: the plainest first.
CAUSES = ("failures", "quality", "acceptance", "parity", "latency", "other")
ROW_ORDER = ("tpot", "e2e", "ttft_p50", "ttft_tail", "e2e_tail", "acceptance")
TAIL_ORDER = ("failures", "cancels", "feedback", "greedy_mismatch")


# --- input ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One metric x segment of a stored verdict."""

    metric: str
    segment: str
    estimate: float | None
    lower: float | None
    upper: float | None
    n: int
    kill_at: float | None
    margin: float | None
    status: str

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Cell:
        """Read one entry of a verdict's `estimates`."""
        return cls(
            metric=str(row["metric"]),
            segment=str(row["segment"]),
            estimate=_num(row.get("estimate")),
            lower=_num(row.get("lower")),
            upper=_num(row.get("upper")),
            n=int(row.get("n") or 0),
            kill_at=_num(row.get("kill_at")),
            margin=_num(row.get("margin")),
            status=str(row.get("status") or "idle"),
        )


@dataclass(frozen=True)
class Facts:
    """A verdict as stored: what the headline is built from."""

    decision: str
    reason_codes: tuple[str, ...]
    cells: tuple[Cell, ...]
    n_pairs: int

    @classmethod
    def of(cls, verdict: Any) -> Facts:
        """Read a verdict row, a `VerdictResult` or its JSON (a mapping)."""
        get = verdict.get if isinstance(verdict, Mapping) else lambda k: getattr(verdict, k)
        decision = get("decision")
        rows: Any = get("estimates") if _has(verdict, "estimates") else None
        if callable(rows):  # a `VerdictResult`: its JSON-ready table
            rows = rows()
        return cls(
            decision=str(getattr(decision, "value", decision)),
            reason_codes=tuple(get("reason_codes") or ()),
            cells=tuple(Cell.from_json(r) for r in (rows or [])),
            n_pairs=int(get("n_pairs") or 0),
        )


@dataclass(frozen=True)
class Pace:
    """How fast the stage gathers evaluated pairs: seen so far, over how long."""

    pairs: int
    elapsed_s: float

    @property
    def per_second(self) -> float | None:
        """Return pairs per second, or None before there is a rate."""
        return self.pairs / self.elapsed_s if self.pairs and self.elapsed_s > 0 else None


def _has(verdict: Any, key: str) -> bool:
    return key in verdict if isinstance(verdict, Mapping) else hasattr(verdict, key)


def _num(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


# --- reasons (the one parser of reason codes) -----------------------------------------


@dataclass(frozen=True)
class Reason:
    """One reason code, parsed: `kind` (decision or `warmup`), `what`, metric, segment."""

    code: str
    kind: str
    what: str
    metric: str | None = None
    segment: str | None = None


def parse_reason(code: str) -> Reason:
    """Parse one reason code of the gate (a metric may hold a colon: `eval:schema`)."""
    kind, sep, rest = code.partition(":")
    if not sep:
        return Reason(code, kind, kind)
    head, _, segment = rest.rpartition(":")
    if kind == "kill" and head == "acceptance_collapse":
        return Reason(code, kind, "collapse", "acceptance", segment)
    if kind == "kill" and head:
        return Reason(code, kind, "harm", head, segment)
    if kind == "continue" and head.startswith("unproven:"):
        return Reason(code, kind, "unproven", head.removeprefix("unproven:"), segment)
    return Reason(code, kind, rest)


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


def label(metric: str) -> str:
    """Return a guardrail's name in words."""
    if metric.startswith("eval:"):
        return metric.removeprefix("eval:").replace("_", " ")
    if metric.startswith("parity:"):
        stat = metric.removeprefix("parity:")
        return f"sampled-output parity ({PARITY_WORDS.get(stat, stat)})"
    return LABELS.get(metric, metric.replace("_", " "))


def family(metric: str) -> str:
    """Return the guardrail family of a metric."""
    if metric.startswith(("eval:", "parity:")):
        return "quality"
    return FAMILIES.get(metric, "other")


# The answer statistics of sampled-output parity (`gate.parity.STATISTICS`), in words.
PARITY_WORDS = {
    "mean_logprob": "mean log-prob per token under the model",
    "length": "answer length",
    "distinct_2": "distinct bigrams",
}


def reason_sentences(codes: Iterable[str], policy: Policy | None = None) -> list[str]:
    """Return one sentence per reason family, grouped, for people (codes stay for machines)."""
    reasons = [parse_reason(c) for c in codes]
    out: list[str] = []
    groups: dict[str, dict[str, list[str]]] = {}
    for r in reasons:
        if r.metric is not None and r.segment is not None:
            groups.setdefault(r.what, {}).setdefault(r.metric, []).append(r.segment)
            continue
        out.append(_plain_reason(r, policy))
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


def _plain_reason(r: Reason, policy: Policy | None) -> str:
    minimum = f" ({policy.min_pairs:,})" if policy else ""
    duration = f" ({_duration(policy.min_duration_s)})" if policy else ""
    warm = f" ({policy.warmup_pairs:,} pairs)" if policy else ""
    primary = label(policy.primary.metric) if policy else "primary latency"
    words = {
        "warmup": f"Warming up{warm}: no test runs until warm-up ends.",
        "no_pairs": "No evaluated pairs in this stage yet.",
        "min_pairs": f"Fewer tested pairs than the minimum for promotion{minimum}.",
        "min_duration": f"Younger than the minimum duration{duration}.",
        "gain_unproven": f"The {primary} gain is not proven yet.",
        "dropped_share": "Too many pairs were dropped to trust the comparison.",
        "cohort_imbalance": "The cohorts' shares are off their expected split.",
        "max_duration": "No decision within the maximum duration.",
        "load_untested": (
            f"The {primary} gain is proven only at loads well below what promotion brings"
            " to the candidate; promotion waits for evidence nearer that load."
        ),
        "gain_proven": f"The {primary} gain is proven.",
        "guardrails_inside": "Every guardrail is proven within its margin.",
    }
    if r.kind == "alarm" and r.what.startswith("control_parity:"):
        stat = r.what.removeprefix("control_parity:")
        return (
            f"Data-quality alarm: the control slice (baseline vs baseline) shifted in "
            f"{PARITY_WORDS.get(stat, stat)}; sampled-output parity cannot be trusted (not a kill)."
        )
    return words.get(r.what, f"{r.code.replace('_', ' ')}.")


# --- the headline ---------------------------------------------------------------------


class Line(BaseModel):
    """One guardrail on the pooled segment: estimate, interval, status and colour."""

    metric: str
    family: str
    label: str
    estimate: str
    interval: str
    status: str
    status_words: str
    colour: str
    n: int
    text: str


class Headline(BaseModel):
    """The answer at a glance for one rollout."""

    decision: str
    decision_words: str
    sentence: str
    lines: list[Line]
    reasons: list[str]
    reason_codes: list[str]
    pairs_needed: int | None
    seconds_needed: float | None
    next_decision: str | None
    n_pairs: int
    # Evaluated pairs of the stage so far, warm-up included (None: pace unknown).
    pairs_seen: int | None = None


def headline(verdict: Any, *, policy: Policy, pace: Pace | None = None) -> Headline:
    """Return the headline of a stored verdict (a row, a result or its JSON)."""
    facts = Facts.of(verdict)
    lines = [_line(c, policy) for c in _ordered(facts.cells) if c.segment == ALL]
    needs = _pairs_needed(facts, policy, pace)
    needed, goal = needs.pairs, needs.goal
    rate = pace.per_second if pace else None
    seconds = needed / rate if needed is not None and rate else None
    if goal == "promotion" and pace is not None:
        left = policy.min_duration_s - pace.elapsed_s  # promotion also waits for the clock
        seconds = max(seconds or 0.0, left) if left > 0 else seconds
    return Headline(
        decision=facts.decision,
        decision_words=DECISION_WORDS.get(facts.decision, facts.decision.title()),
        sentence=_sentence(facts, policy, lines, needs, seconds, pace),
        lines=lines,
        reasons=reason_sentences(facts.reason_codes, policy) + parity_sentences(facts.cells),
        reason_codes=list(facts.reason_codes),
        pairs_needed=needed,
        seconds_needed=seconds,
        next_decision=goal,
        n_pairs=facts.n_pairs,
        pairs_seen=pace.pairs if pace else None,
    )


def _line(cell: Cell, policy: Policy) -> Line:
    status = cell_status(cell, policy)
    estimate, interval = format_estimate(cell), format_interval(cell)
    words = STATUS_WORDS[status]
    shown = f"{estimate} (95 % CI {interval})" if interval else "no data yet"
    if not interval:
        words = "no data" if status == "no_data" else words
    return Line(
        metric=cell.metric,
        family=family(cell.metric),
        label=label(cell.metric),
        estimate=estimate,
        interval=interval,
        status=status,
        status_words=words,
        colour=STATUS_COLOURS[status],
        n=cell.n,
        text=f"{family(cell.metric)} · {label(cell.metric)}: {shown}"
        + ("" if status == "no_data" else f", {words}"),
    )


def cell_status(cell: Cell, policy: Policy) -> Status:
    """Return a cell's status: proven better, within margin, unproven, harmful or none."""
    if cell.status == "harmful":
        return "harmful"
    if cell.estimate is None or not cell.n:
        return "no_data"
    if cell.status == "idle":
        return "not_gating"
    if cell.metric == policy.primary.metric and cell.upper is not None:
        if cell.upper < 1 - policy.primary.min_gain:
            return "better"
    elif cell.metric == "acceptance":
        pass  # a floor: above it is all there is to prove
    elif cell.upper is not None and cell.upper < (1.0 if cell.metric in RATIOS else 0.0):
        return "better"
    return "inside" if cell.status == "inside" else "unproven"


def format_estimate(cell: Cell) -> str:
    """Return a cell's estimate in words a person reads: `-38 %`, `+1.2 pts`, `62 %`."""
    if cell.estimate is None:
        return "no data"
    return _value(cell.metric, cell.estimate)


def format_interval(cell: Cell) -> str:
    """Return a cell's interval as `low to high` on the estimate's scale."""
    if cell.estimate is None:
        return ""
    low = f"{MINUS}∞" if cell.lower is None else _value(cell.metric, cell.lower)
    high = "+∞" if cell.upper is None else _value(cell.metric, cell.upper)
    if cell.metric == "acceptance":  # no unbounded side: 0 and 1 bound it
        low = _value(cell.metric, max(0.0, cell.lower or 0.0))
        high = _value(cell.metric, min(1.0, 1.0 if cell.upper is None else cell.upper))
    return f"{low} to {high}"


def _value(metric: str, value: float) -> str:
    if metric.startswith("parity:"):  # d in standard deviations of d (warm-up)
        return _signed(value, " sd")
    if metric in RATIOS:
        return _signed(100 * (value - 1), " %")
    if metric == "acceptance":
        return f"{100 * value:.0f} %"
    return _signed(100 * value, " pts")


def _signed(value: float, unit: str) -> str:
    digits = 0 if abs(value) >= 10 or unit == " %" else 1
    text = f"{abs(value):.{digits}f}"
    if float(text) == 0:
        return f"0{unit}" if digits == 0 else f"{text}{unit}"
    return f"{MINUS if value < 0 else '+'}{text}{unit}"


def _ordered(cells: Iterable[Cell]) -> list[Cell]:
    def rank(cell: Cell) -> tuple[int, str]:
        if cell.metric in ROW_ORDER:
            return (ROW_ORDER.index(cell.metric), "")
        if cell.metric.startswith("eval:"):
            return (len(ROW_ORDER), cell.metric)
        tail = TAIL_ORDER.index(cell.metric) if cell.metric in TAIL_ORDER else len(TAIL_ORDER)
        return (len(ROW_ORDER) + 1 + tail, cell.metric)

    return sorted(cells, key=rank)


# --- what the next decision needs -----------------------------------------------------


def _pairs_needed(facts: Facts, policy: Policy, pace: Pace | None) -> Needs:
    """Return about how many more pairs the next decision needs, and which decision."""
    codes = {parse_reason(c).what for c in facts.reason_codes}
    if facts.decision != "continue":
        return Needs(None, None)
    seen = pace.pairs if pace else facts.n_pairs
    if codes & {"warmup", "no_pairs"}:
        return Needs(max(0, policy.warmup_pairs + 1 - seen), "the first test")
    total = max(facts.n_pairs, 1)
    wanted, past = float(policy.min_pairs), None
    for cell in facts.cells:
        if cell.status != "unproven" and not _gain_cell(cell, policy):
            continue
        if _out_of_reach(cell, policy):
            return Needs(None, "promotion", blocked=label(cell.metric))
        scale = _cell_scale(cell, policy)
        if scale is None:
            past = past or label(cell.metric)  # its estimate sits past the goal, in a wide interval
            continue
        wanted = max(wanted, total * scale)
    # Rounded first: 9.000000001 times the pairs is 9 times, not one more.
    more = max(0, math.ceil(round(wanted - facts.n_pairs, 6)))
    if past is not None and more == 0:
        # Unproven, so more than none; how many, no extrapolation from today's bound says.
        return Needs(None, "promotion", at_least=True, untold=past)
    return Needs(more, "promotion", at_least=past is not None)


@dataclass(frozen=True)
class Needs:
    """What the next decision needs: about how many more pairs, for which decision."""

    pairs: int | None
    goal: str | None
    at_least: bool = False
    blocked: str | None = None  # a guardrail proven outside its margin: promotion is out
    untold: str | None = None  # a guardrail whose estimate is past its goal: count untold


def _goal(cell: Cell, policy: Policy) -> float | None:
    if cell.metric == "acceptance":
        return cell.kill_at
    return 1 - policy.primary.min_gain if _gain_cell(cell, policy) else cell.margin


def _gain_cell(cell: Cell, policy: Policy) -> bool:
    unproven = cell.upper is None or cell.upper >= 1 - policy.primary.min_gain
    return cell.metric == policy.primary.metric and cell.segment == ALL and unproven


def _out_of_reach(cell: Cell, policy: Policy) -> bool:
    """Whether the whole interval lies past the goal: more pairs will not bring it inside."""
    goal = _goal(cell, policy)
    if cell.estimate is None or goal is None:
        return False
    if cell.metric == "acceptance":
        return cell.upper is not None and cell.upper <= goal
    return cell.lower is not None and cell.lower >= goal


def _cell_scale(cell: Cell, policy: Policy) -> float | None:
    """Return how many times today's pairs the cell needs for its bound to reach its goal.

    Interval widths shrink about as 1/sqrt(n), so n grows with the square of
    (half-width / distance from the estimate to the goal). None: the estimate itself is
    past the goal, so no extrapolation says when the bound gets there.
    """
    goal = _goal(cell, policy)
    if cell.estimate is None or not cell.n or goal is None:
        return 1.0  # no data of its own yet: nothing to extrapolate from
    if cell.metric == "acceptance":
        if cell.lower is None or cell.estimate <= goal:
            return None
        return ((cell.estimate - cell.lower) / (cell.estimate - goal)) ** 2
    if cell.estimate >= goal:
        return None
    if cell.upper is None:  # unbounded yet: wait for the first bounded look
        return 2.0
    return ((cell.upper - cell.estimate) / (goal - cell.estimate)) ** 2


# --- the sentence ---------------------------------------------------------------------


def _sentence(
    facts: Facts,
    policy: Policy,
    lines: list[Line],
    needs: Needs,
    seconds: float | None,
    pace: Pace | None,
) -> str:
    words = DECISION_WORDS.get(facts.decision, facts.decision.title())
    codes = [parse_reason(c) for c in facts.reason_codes]
    if any(r.what in ("warmup", "no_pairs") for r in codes):
        seen = f"{pace.pairs:,} of {policy.warmup_pairs:,} warm-up pairs seen, " if pace else ""
        return f"{words}: not enough data yet; {seen}" + _needs(needs, seconds) + "."
    if facts.decision == "kill":
        found = _kill_causes(facts, policy, lines)
        causes = "; ".join(text for _, text in found[:2]) or "proven harm"
        if len(found) > 2:
            causes += f"; and {len(found) - 2} more guardrail(s)"
        return f"{words}: {causes}."
    if facts.decision == "hold":
        why = [r for r in codes if r.kind == "hold"]
        return f"{words}: " + " ".join(_plain_reason(r, policy) for r in why).rstrip(".") + "."
    parts = [_speed(lines, policy), _quality(lines, policy)]
    if facts.decision == "continue":
        parts.append(_needs(needs, seconds))
    return f"{words}: " + ", ".join(p for p in parts if p) + "."


def _kill_causes(facts: Facts, policy: Policy, lines: list[Line]) -> list[tuple[str, str]]:
    """Return every kill cause as (family, words), the plainest first: the guardrails harmful
    pooled, those harmful only in some segments, and the acceptance collapses."""
    found = [(line.family, _cause(line)) for line in lines if line.status == "harmful"]
    pooled = {line.metric for line in lines if line.status == "harmful"}
    segments: dict[str, list[Cell]] = {}
    for c in facts.cells:
        if c.status == "harmful" and c.segment != ALL and c.metric not in pooled:
            segments.setdefault(c.metric, []).append(c)
    for metric, cells in segments.items():
        where = ", ".join(c.segment for c in cells)
        found.append((family(metric), f"{_cause(_line(cells[0], policy))} on {where}"))
    collapsed = [r.segment or ALL for r in map(parse_reason, facts.reason_codes)
                 if r.what == "collapse"]  # fmt: skip
    if collapsed:
        where = "" if collapsed == [ALL] else f" on {', '.join(collapsed)}"
        found.append(("acceptance", f"draft acceptance collapsed{where}"))
    return sorted(found, key=lambda x: CAUSES.index(x[0]) if x[0] in CAUSES else len(CAUSES))


def _cause(line: Line) -> str:
    what = {
        "failures": "the candidate fails more often",
        "quality": "quality dropped",
        "latency": "the candidate is slower",
        "acceptance": "draft acceptance is below its floor",
        "parity": "greedy outputs diverge",
    }.get(line.family, "proven harm")
    if line.metric.startswith("parity:"):
        what = "sampled outputs shifted"
    return f"{what}: {line.label} {line.estimate} (95 % CI {line.interval})"


def _speed(lines: list[Line], policy: Policy) -> str:
    primary = next((line for line in lines if line.metric == policy.primary.metric), None)
    if primary is None or primary.status == "no_data":
        return "speed not measured yet"
    shown = f"{primary.label} {primary.estimate}, 95 % CI {primary.interval}"
    if primary.status == "better":
        return f"faster ({shown})"
    if primary.status == "harmful":
        return f"slower ({shown})"
    return f"speed gain not proven yet ({shown})"


def _quality(lines: list[Line], policy: Policy) -> str:
    guards = [line for line in lines if line.metric != policy.primary.metric]
    harmful = [line.label for line in guards if line.status == "harmful"]
    unproven = [line.label for line in guards if line.status == "unproven"]
    if harmful:
        return "harm proven in " + ", ".join(harmful)
    if unproven:
        more = f" and {len(unproven) - 3} more" if len(unproven) > 3 else ""
        return (
            f"{len(unproven)} guardrail(s) not yet within margin ({', '.join(unproven[:3])}{more})"
        )
    return "quality within margins"


def _needs(needs: Needs, seconds: float | None) -> str:
    if needs.goal is None:
        return ""
    if needs.pairs is None and needs.untold is not None:
        return (
            f"more pairs needed for {needs.goal}, how many cannot be told yet "
            f"({needs.untold} is estimated past its goal)"
        )
    if needs.pairs is None:
        return f"{needs.goal} out of reach: {needs.blocked} is proven outside its margin"
    when = f", about {_duration(seconds)} at this rate" if seconds is not None else ""
    least = "at least " if needs.at_least else ""
    return f"{least}{needs.pairs:,} more pairs needed for {needs.goal}{when}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 90:
        return "1 min"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.0f} h" if seconds >= 10 * 3600 else f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


# --- the guardrail x segment grid -----------------------------------------------------


class GridCell(BaseModel):
    """One metric x segment: estimate, interval, status, and the pairs behind it."""

    metric: str
    segment: str
    estimate: str
    interval: str
    status: str
    status_words: str
    colour: str
    n: int
    margin: str
    kill_at: str


class GridRow(BaseModel):
    metric: str
    label: str
    family: str
    cells: list[GridCell | None]


class Grid(BaseModel):
    """Rows: guardrails; columns: `all`, then the segments."""

    segments: list[str]
    rows: list[GridRow]


def grid(verdict: Any, *, policy: Policy) -> Grid:
    """Return the guardrail x segment grid of a stored verdict."""
    facts = Facts.of(verdict)
    segments = [ALL, *[s for s in policy.segments if any(c.segment == s for c in facts.cells)]]
    by_key = {(c.metric, c.segment): c for c in facts.cells}
    metrics = list(dict.fromkeys(c.metric for c in _ordered(facts.cells)))
    rows = [
        GridRow(
            metric=m,
            label=label(m),
            family=family(m),
            cells=[_grid_cell(by_key.get((m, s)), policy) for s in segments],
        )
        for m in metrics
    ]
    return Grid(segments=segments, rows=rows)


def _grid_cell(cell: Cell | None, policy: Policy) -> GridCell | None:
    if cell is None:
        return None
    status = cell_status(cell, policy)

    def bound(value: float | None) -> str:
        return "" if value is None else _value(cell.metric, value)

    return GridCell(
        metric=cell.metric,
        segment=cell.segment,
        estimate=format_estimate(cell),
        interval=format_interval(cell),
        status=status,
        status_words=STATUS_WORDS[status],
        colour=STATUS_COLOURS[status],
        n=cell.n,
        margin=bound(cell.margin),
        kill_at=bound(cell.kill_at),
    )


# --- a recorded rehearsal (`specgate rehearse --rollout`) -------------------------------

REHEARSAL_HEADERS = ["segment", "concurrency", "speedup [95 % interval]", "call"]
REHEARSAL_TITLE = "Rehearsal before rollout: speedup (baseline / candidate) vs concurrency"
NO_REHEARSAL = "No rehearsal recorded for this rollout (`specgate rehearse --rollout ID`)."
# `specgate rehearse`'s decision at --at, as a sentence's end.
ANSWER_WORDS = {
    "pays": "speculation pays",
    "does not pay": "speculation does not pay",
    "could not tell": "the sweep could not tell",
}
CALL_WORDS = {
    "wins": "candidate faster",
    "loses": "candidate slower",
    "unclear": "could not tell",
}


def rehearsal_sentence(
    *, run_at: datetime | None, recorded_at: datetime, routes: tuple[str, str], workload: str,
    requests: int, levels: list[int],
) -> str:  # fmt: skip
    """Say when a rehearsal ran, against which routes and workload, over which sweep."""
    when = f"Rehearsed {_when(run_at)}" if run_at else f"Recorded {_when(recorded_at)}"
    sweep = f"{levels[0]} to {levels[-1]}" if len(levels) > 1 else str(levels[0])
    return (
        f"{when}: baseline {routes[0]} against candidate {routes[1]}, workload {workload} "
        f"({requests:,} requests), {sweep} concurrent requests."
    )


def rehearsal_crossover(segment: str, text: str) -> str:
    """Say where the candidate stops winning in one segment (the sweep's own words)."""
    name = "all segments" if segment == ALL else segment
    return f"Crossover, {name}: {text}."


def rehearsal_answer(at: int | None, decision: str, top: int) -> str:
    """Say what the rehearsal answers at the production concurrency (`--at`)."""
    if at is None:
        return "No production concurrency (--at) was given: the rehearsal answers for none."
    beyond = f" ({at} is above the sweep's {top})" if at > top else ""
    return f"At production concurrency {at}: {ANSWER_WORDS.get(decision, decision)}{beyond}."


def rehearsal_speedup(speedup: float | None, interval: tuple[float, float] | None) -> str:
    """Return a level's speedup as people read it: "1.31 [1.12, 1.52]"."""
    if speedup is None or interval is None:
        return "too few answers"
    return f"{speedup:.2f} [{interval[0]:.2f}, {interval[1]:.2f}]"


def call_words(call: str | None) -> str:
    """Return a level's call in words."""
    return CALL_WORDS.get(call or "", "too few answers")


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


# --- text renderings (terminal and Markdown) ------------------------------------------


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
