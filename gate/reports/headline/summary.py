"""The headline: the decision in one sentence, one line per guardrail, and the reasons."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from gate.reports.headline.acts import Act
from gate.reports.headline.arm_words import ArmLine, arm_lines, arms_sentence
from gate.reports.headline.cells import (
    STATUS_COLOURS,
    STATUS_WORDS,
    cell_status,
    family,
    format_estimate,
    format_interval,
    label,
    ordered,
)
from gate.reports.headline.facts import Cell, Facts, Pace
from gate.reports.headline.needs import Needs, pairs_needed
from gate.reports.headline.reasons import (
    format_duration,
    parity_sentences,
    parse_reason,
    plain_reason,
    reason_sentences,
)
from gate.stats.policy import ALL, Policy

DECISION_WORDS = {
    "continue": "Continue",
    "promote": "Promote",
    "kill": "Kill",
    "hold": "Hold",
}
# The order kill causes are named in: the plainest first.
CAUSES = ("failures", "quality", "acceptance", "parity", "latency", "other")


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

    # What the headline leads with: the act that put the rollout where it is, if someone
    # killed, held or promoted it; else the gate's newest verdict.
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
    # Pairs left out as not load-matched (a promoted rollout routed by load judges only
    # pairs whose routes' running requests were close, `promotion.load_match`).
    unmatched: int = 0
    # Episodes among the tested pairs (None: no episode held two pairs).
    episodes: int | None = None
    # Evaluated pairs of the stage so far, warm-up included (None: pace unknown).
    pairs_seen: int | None = None
    # The kill, hold or promote the headline leads with (None: it leads with the verdict).
    act: Act | None = None
    # The gate's latest view: its verdict's decision and sentence, whatever the lead.
    verdict_decision: str = ""
    verdict_sentence: str = ""
    # A rollout with several candidates: one line per arm, and the choice's winner and
    # leader (empty and None for a single candidate).
    arms: list[ArmLine] = []
    winner: str | None = None
    leader: str | None = None


def headline(
    verdict: Any,
    *,
    policy: Policy,
    pace: Pace | None = None,
    act: Act | None = None,
    promote_next: str | None = None,
    shares: Mapping[str, float] | None = None,
) -> Headline:
    """Return the headline of a stored verdict (a row, a result or its JSON), led by `act`
    when someone killed, held or promoted the rollout; `promote_next` says what a promote
    would do (the next stage's share, or all of the traffic); `shares` are a rollout with
    arms' current shares of the episodes, said per arm."""
    facts = Facts.of(verdict)
    lines = [_line(c, policy) for c in ordered(facts.cells) if c.segment == ALL]
    needs = pairs_needed(facts, policy, pace)
    needed, goal = needs.pairs, needs.goal
    rate = pace.per_second if pace else None
    seconds = needed / rate if needed is not None and rate else None
    if goal == "promotion" and pace is not None:
        left = policy.min_duration_s - pace.elapsed_s  # promotion also waits for the clock
        seconds = max(seconds or 0.0, left) if left > 0 else seconds
    view = _sentence(facts, policy, lines, needs, seconds, pace)
    arms = arm_lines(facts.arms, policy, shares)
    if arms:
        view = arms_sentence(view, arms, decision=facts.decision)
    if facts.decision == "promote" and promote_next:
        view = f"{view.rstrip('.')}; {promote_next}."
    words = DECISION_WORDS.get(facts.decision, facts.decision.title())
    return Headline(
        decision=act.decision if act else facts.decision,
        decision_words=act.words if act else words,
        sentence=f"{act.sentence}. The gate's latest view: {view}" if act else view,
        act=act,
        verdict_decision=facts.decision,
        verdict_sentence=view,
        lines=lines,
        reasons=reason_sentences(facts.reason_codes, policy)
        + parity_sentences(facts.cells)
        + _unmatched(facts, policy),
        reason_codes=list(facts.reason_codes),
        pairs_needed=needed,
        seconds_needed=seconds,
        next_decision=goal,
        n_pairs=facts.n_pairs,
        unmatched=facts.unmatched,
        episodes=facts.episodes,
        pairs_seen=pace.pairs if pace else None,
        arms=arms,
        winner=(facts.arms or {}).get("winner"),
        leader=(facts.arms or {}).get("leader"),
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


def _unmatched(facts: Facts, policy: Policy) -> list[str]:
    """Return the sentence on the pairs left out as not load-matched (none: no sentence)."""
    if not facts.unmatched:
        return []
    apart = f"{policy.promotion.load_match:g}"
    return [
        f"Routed by load, the gate judged only load-matched pairs: {facts.unmatched:,}"
        f" pair(s) whose routes' running requests were more than {apart} apart, or not"
        " recorded, were left out."
    ]


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
        return f"{words}: " + " ".join(plain_reason(r, policy) for r in why).rstrip(".") + "."
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
    reasons = map(parse_reason, facts.reason_codes)
    down = [("availability", _lower(plain_reason(r, policy))) for r in reasons
            if r.what == "candidate_down"]  # fmt: skip
    ranked = sorted(found, key=lambda x: CAUSES.index(x[0]) if x[0] in CAUSES else len(CAUSES))
    return down + ranked


def _lower(sentence: str) -> str:
    return sentence[:1].lower() + sentence[1:].rstrip(".")


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
    if line.metric == "loop":
        what = "the candidate loops (acceptance length near k + 1, distinct-2 collapsed)"
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
    when = f", about {format_duration(seconds)} at this rate" if seconds is not None else ""
    least = "at least " if needs.at_least else ""
    return f"{least}{needs.pairs:,} more pairs needed for {needs.goal}{when}"
