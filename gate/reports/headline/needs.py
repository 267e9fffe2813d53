"""What the next decision needs: about how many more pairs, for which decision."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gate.reports.headline.cells import label
from gate.reports.headline.facts import Cell, Facts, Pace
from gate.reports.headline.reasons import parse_reason
from gate.stats.policy import ALL, Policy


@dataclass(frozen=True)
class Needs:
    """What the next decision needs: about how many more pairs, for which decision."""

    pairs: int | None
    goal: str | None
    at_least: bool = False
    blocked: str | None = None  # a guardrail proven outside its margin: promotion is out
    untold: str | None = None  # a guardrail whose estimate is past its goal: count untold


def pairs_needed(facts: Facts, policy: Policy, pace: Pace | None) -> Needs:
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
