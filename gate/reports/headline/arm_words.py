"""A rollout with several candidates (issue 40) in words: the winner or leader, each arm's
state and interval, and the arms killed on their own.

The input is the verdict's `arms` JSON (`gate.stats.arms_replay.to_json`, stored in
`verdicts.arms`). An arm's ratio is the geometric-mean primary-metric ratio to the
baseline; its interval is the best-arm choice's (all arms cover at once at
`1 - alpha_choice`), so it is said as the choice's interval, not a 95 % one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from gate.reports.headline.cells import MINUS, format_value, label
from gate.reports.headline.reasons import parse_reason, plain_reason
from gate.stats.policy import Policy

STATE_WORDS = {
    "waiting": "no pairs yet",
    "running": "running",
    "killed": "killed",
    "best": "best",
    "tied": "tied best",
    "promoted": "winner",
}


class ArmLine(BaseModel):
    """One arm: its role in the choice, state, pairs, primary change and interval."""

    arm: str
    # The primary latency metric's name in words (what `estimate` and `interval` are of).
    metric: str
    # "winner", "leader", or "" (neither).
    role: str
    state: str
    state_words: str
    decision: str
    pairs: int
    estimate: str
    interval: str
    # Why its own gate killed it, in words (empty unless killed).
    causes: list[str]
    text: str
    # Its current share of the sampled episodes (`gate.stats.arms.shares`); None: not
    # active, or not known. The text says it only when the shares are unequal (reallocated).
    share: float | None = None


def arm_lines(
    choice: Mapping[str, Any] | None, policy: Policy, shares: Mapping[str, float] | None = None
) -> list[ArmLine]:
    """Return one line per arm of a verdict's choice (none: a single-candidate verdict),
    with each active arm's share of the episodes from `shares`."""
    if not choice:
        return []
    roles = {choice.get("leader"): "leader", choice.get("winner"): "winner"}
    lines = [_line(arm, roles.get(arm["arm"], ""), policy) for arm in choice.get("arms") or []]
    said = shares is not None and len(set(shares.values())) > 1
    return [_with_share(line, (shares or {}).get(line.arm), said=said) for line in lines]


def arms_sentence(view: str, lines: list[ArmLine], *, decision: str) -> str:
    """Return the verdict's sentence with the choice said first and the arms killed on
    their own said last (`view` is "Decision: rest.")."""
    words, _, rest = view.partition(": ")
    lead = next((line for line in lines if line.role == "winner"), None)
    lead = lead or next((line for line in lines if line.role == "leader"), None)
    killed = [line for line in lines if line.state == "killed"]
    if lead is not None and lead.role == "winner":
        first = f"arm '{lead.arm}' is the best arm and its own gate promotes"
    elif lead is not None:
        first = f"arm '{lead.arm}' leads"
    elif decision == "kill":
        first = "every arm was killed"
    else:
        first = "no arm leads yet"
    parts = [first, rest.rstrip(".")]
    if killed and decision != "kill":
        parts.append("killed on its own: " + "; ".join(_killed(line) for line in killed))
    return f"{words}: " + "; ".join(p for p in parts if p) + "."


def _with_share(line: ArmLine, share: float | None, *, said: bool) -> ArmLine:
    if not said or share is None:
        return line.model_copy(update={"share": share})
    text = f"{line.text}, {100 * share:.0f} % of the episodes"
    return line.model_copy(update={"share": share, "text": text})


def _line(arm: Mapping[str, Any], role: str, policy: Policy) -> ArmLine:
    metric = policy.primary.metric
    ratio = arm.get("ratio")
    low, high = [*(arm.get("interval") or []), None, None][:2]
    estimate = "no data" if ratio is None else format_value(metric, ratio)
    interval = _interval(metric, low, high) if ratio is not None else ""
    state = str(arm.get("state") or "running")
    causes = _causes(arm.get("reason_codes") or [], policy) if state == "killed" else []
    shown = f"{label(metric)} {estimate} (choice interval {interval})" if interval else ""
    role_words = f", {role}" if role and STATE_WORDS.get(state) != role else ""
    why = f": {', '.join(causes)}" if causes else ""
    return ArmLine(
        arm=str(arm["arm"]),
        metric=label(metric),
        role=role,
        state=state,
        state_words=STATE_WORDS.get(state, state),
        decision=str(arm.get("decision") or ""),
        pairs=int(arm.get("pairs") or 0),
        estimate=estimate,
        interval=interval,
        causes=causes,
        text=f"arm {arm['arm']} ({STATE_WORDS.get(state, state)}{role_words}):"
        f" {shown or 'no data yet'},"
        f" {int(arm.get('pairs') or 0):,} pairs{why}",
    )


def _interval(metric: str, low: float | None, high: float | None) -> str:
    below = f"{MINUS}∞" if low is None else format_value(metric, low)
    return f"{below} to {'+∞' if high is None else format_value(metric, high)}"


def _causes(codes: list[str], policy: Policy) -> list[str]:
    """Return an arm's kill reasons in a few words each: the harmful guardrails, then others."""
    reasons = [parse_reason(c) for c in codes]
    kills = [r for r in reasons if r.kind == "kill"]
    harmed = list(dict.fromkeys(label(r.metric) for r in kills if r.what == "harm" and r.metric))
    said = [f"harm proven in {', '.join(harmed)}"] if harmed else []
    others = [r for r in kills if r.what != "harm"]
    said += [plain_reason(r, policy).rstrip(".") for r in others]
    return said or ["killed by its own gate"]


def _killed(line: ArmLine) -> str:
    return f"arm '{line.arm}' ({', '.join(line.causes) or 'killed'})"
