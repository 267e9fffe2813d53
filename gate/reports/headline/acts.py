"""What someone did to the rollout, in words: the lead of the headline after a kill, hold
or promote, and what a promote would do next.

A verdict says what the gate thinks; the rollout's state says what happened. After a
person, a controller or the gate itself kills, holds or promotes a rollout, the headline
leads with that act (what, who, when, why, from the audit trail) and the gate's latest
view follows it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from gate.audit import GATE_ACTOR
from gate.db.enums import RolloutMode
from gate.rollouts.exposure import Exposure, percent

# The audit actions that put a rollout where it is, as the headline's decision and word.
LEADS = {
    "kill": ("kill", "Killed"),
    "hold": ("hold", "Held"),
    "promote": ("promote", "Promoted"),
    "advance": ("promote", "Promoted"),
    # A controller's promotion over a hold already in force (the watch held first): it is
    # what holds the rollout now (`gate.controllers.hooks`), so it leads as the hold it is.
    "controller.promoted": ("hold", "Held"),
}
# A reason longer than this is clipped in the sentence (the whole text stays in `reason`).
REASON_CHARS = 200


class Act(BaseModel):
    """One state change by someone, as the headline leads with it."""

    action: str
    decision: str
    words: str
    actor: str
    at: datetime
    reason: str
    sentence: str


def act_of(event: Any, *, stages: int) -> Act | None:
    """Return the act an audit event records, or None when it leads nothing (start, resume)."""
    if event is None or event.action not in LEADS:
        return None
    decision, words = LEADS[event.action]
    at = event.created_at.astimezone(UTC)
    what = _promoted_to(event.details or {}, stages) if decision == "promote" else ""
    reason = _clip(event.reason or "")
    why = f', because "{reason}"' if reason else ", with no reason given"
    if event.actor == GATE_ACTOR:
        # The gate's reason is its verdict's raw summary: the view that follows says it in
        # words, with the headline's numbers.
        why = " on its verdict"
    sentence = f"{words}: {what}by {_who(event.actor)} at {at:%Y-%m-%d %H:%M} UTC{why}"
    return Act(
        action=event.action,
        decision=decision,
        words=words,
        actor=event.actor,
        at=at,
        reason=event.reason or "",
        sentence=sentence,
    )


def promotion_next(exposure: Exposure) -> str:
    """Say what a promote does next: the next stage's share, or all of the traffic."""
    after = exposure.next_share
    if after is None:
        return "promoting makes the candidate the route for all of the alias's traffic"
    verb = "mirrored to" if exposure.mode is RolloutMode.SHADOW else "served by"
    return (
        f"promoting moves it to stage {exposure.stage + 2} of {len(exposure.stages)}: "
        f"{percent(after)} of requests {verb} the candidate"
    )


def _promoted_to(details: dict[str, Any], stages: int) -> str:
    if "percent" in details and "stage" in details:
        return f"to stage {int(details['stage']) + 1} of {stages} ({details['percent']:g} %) "
    return "to all of the alias's traffic "


def _who(actor: str) -> str:
    return "the gate" if actor == GATE_ACTOR else actor


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"
