"""Flagger webhooks and Argo Rollouts notifications, answered by their protocols' meaning.

Flagger reads any 2xx as "go on", except for `rollback`, where 2xx means "roll back now":
so `rollback` answers 2xx only when the rollout is killed in specgate. Every answer other
than 2xx names why, so a waiting canary shows the reason in Flagger's events.

Flagger's own rollback reaches specgate through `post-rollout`, which Flagger calls with
phase Failed only at the end of a rollback of the revision under analysis. The `event`
hook never changes a rollout: Flagger sends each Kubernetes Event with the Canary's phase
at that moment (`CallEventWebhook` reads `Status.Phase`), so after a rollback the next
revision's first events ("Confirm-rollout check ... passed") still say Failed. An event's
phase is the Canary's state, not a verdict on this revision; warnings are kept in the
audit trail as `controller.event`.

Flagger restarts the analysis under the same Canary and webhooks when the target's spec
changes mid-analysis ("New revision detected! Restarting analysis"); only the `checksum`
every payload carries (a hash of `Status.LastAppliedSpec` and tracked configs) tells.
The link keeps the checksum of the revision its rollout judges; an analysis hook with
another one holds the rollout and is never confirmed: the pairs so far judge the old one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from gate import audit
from gate.controllers import links
from gate.controllers.analysis import decision_of, latest_verdict
from gate.controllers.redact import redact
from gate.db.enums import Decision, RolloutState
from gate.db.models import ControllerKind, ControllerLink, Rollout, Route
from gate.rollouts.states import Action
from gate.routing import service as routing
from gate.routing.pubsub import Publisher

# How a hold after the controller's own promotion reads (`rollout show`, /ui).
PROMOTED_BY = "promoted by "
# Returns None when the route answers, else why not.
Probe = Callable[[Route], str | None]
# Flagger's `eventType` of a Kubernetes Warning event (corev1.EventTypeWarning).
EVENT_WARNING = "Warning"


class FlaggerHook(StrEnum):
    CONFIRM_ROLLOUT = "confirm-rollout"
    PRE_ROLLOUT = "pre-rollout"
    ROLLOUT = "rollout"
    CONFIRM_TRAFFIC_INCREASE = "confirm-traffic-increase"
    CONFIRM_PROMOTION = "confirm-promotion"
    POST_ROLLOUT = "post-rollout"
    ROLLBACK = "rollback"
    EVENT = "event"


# Hooks Flagger calls only after it synced the Canary's status to the revision under analysis,
# so their `checksum` is that revision's. `confirm-rollout` and the Events that open a
# revision go out before that sync (scheduler.go `checkCanaryStatus`) and carry the
# previous revision's checksum; `post-rollout` ends the analysis and is acted on as it is.
REVISION_HOOKS = frozenset(
    {
        FlaggerHook.PRE_ROLLOUT,
        FlaggerHook.ROLLOUT,
        FlaggerHook.CONFIRM_TRAFFIC_INCREASE,
        FlaggerHook.CONFIRM_PROMOTION,
        FlaggerHook.ROLLBACK,
    }
)
# Flagger reads any answer above 202 as "not yet" for these and waits.
CONFIRMATIONS = frozenset({FlaggerHook.CONFIRM_TRAFFIC_INCREASE, FlaggerHook.CONFIRM_PROMOTION})


class FlaggerPayload(BaseModel):
    """What Flagger POSTs to a webhook (extra fields are ignored)."""

    name: str = Field(max_length=253)
    namespace: str = Field(max_length=253)
    phase: str = Field("", max_length=64)
    checksum: str | None = Field(None, max_length=256)
    metadata: dict[str, Any] = Field(default_factory=dict)


class ArgoEvent(StrEnum):
    ABORTED = "rollout-aborted"
    COMPLETED = "rollout-completed"


class ArgoNotification(BaseModel):
    """The body specgate's Argo Rollouts notification template sends."""

    event: ArgoEvent
    rollout: str = Field(min_length=1, max_length=128, description="specgate rollout name.")
    controller_rollout: str = Field("", max_length=512, description="namespace/name in k8s.")
    message: str = Field("", max_length=2000)


@dataclass(frozen=True)
class Answer:
    ok: bool
    detail: str


def flagger_actor(payload: FlaggerPayload) -> str:
    """Return the audit actor for a Flagger call."""
    return f"flagger:{payload.namespace}/{payload.name}"


def answer_flagger(
    session: Session,
    *,
    link: ControllerLink,
    rollout: Rollout,
    hook: FlaggerHook,
    payload: FlaggerPayload,
    publisher: Publisher | None,
    probe: Probe,
) -> Answer:
    """Answer one Flagger hook for `rollout`, acting on aborts and promotions it reports."""
    checksum = payload.checksum
    if hook in REVISION_HOOKS and not links.same_revision(
        session, link=link, rollout=rollout, checksum=checksum
    ):
        why = _new_revision(session, rollout, payload, publisher)
        if hook in CONFIRMATIONS:
            return Answer(False, why)
    return _answer(session, rollout, hook, payload, publisher, probe)


def _answer(
    session: Session,
    rollout: Rollout,
    hook: FlaggerHook,
    payload: FlaggerPayload,
    publisher: Publisher | None,
    probe: Probe,
) -> Answer:
    if hook in (FlaggerHook.POST_ROLLOUT, FlaggerHook.EVENT):
        return _report(session, rollout, hook, payload, publisher)
    if hook is FlaggerHook.CONFIRM_ROLLOUT:
        return _ready(rollout, [rollout.baseline_route], probe)
    if hook is FlaggerHook.PRE_ROLLOUT:
        ready = _ready(rollout, [rollout.baseline_route, rollout.candidate_route], probe)
        if ready.ok and rollout.state is RolloutState.PENDING:
            _act(
                session,
                rollout,
                Action.START,
                flagger_actor(payload),
                "Flagger pre-rollout",
                publisher,
            )
        return ready
    if hook is FlaggerHook.ROLLBACK:
        killed = rollout.state is RolloutState.KILLED
        return Answer(killed, "killed in specgate: roll back" if killed else "not killed")
    decision = decision_of(rollout, latest_verdict(session, rollout))
    wanted = {
        FlaggerHook.ROLLOUT: {Decision.CONTINUE, Decision.PROMOTE, Decision.HOLD},
        FlaggerHook.CONFIRM_TRAFFIC_INCREASE: {Decision.CONTINUE, Decision.PROMOTE},
        FlaggerHook.CONFIRM_PROMOTION: {Decision.PROMOTE},
    }[hook]
    return Answer(decision in wanted, f"gate decision: {decision.value}")


def _new_revision(
    session: Session, rollout: Rollout, payload: FlaggerPayload, publisher: Publisher | None
) -> str:
    why = (
        f"Flagger restarted the analysis for a new revision (checksum {payload.checksum}):"
        " the pairs so far judge the old one; create a new rollout for it"
    )
    # Held once: later hooks of the new revision find it held (or stopped) and change nothing,
    # while the confirmations keep answering why. A person who resumes it is held again.
    if rollout.state is RolloutState.RUNNING:
        _act(session, rollout, Action.HOLD, flagger_actor(payload), why, publisher)
    return why


def answer_argo(
    session: Session,
    *,
    rollout: Rollout,
    note: ArgoNotification,
    actor: str,
    publisher: Publisher | None,
) -> Answer:
    """Act on an Argo Rollouts notification: an abort kills, a completion ends mirroring."""
    reason = f"Argo Rollouts {note.event.value} {note.controller_rollout} {note.message}".strip()
    if note.event is ArgoEvent.ABORTED:
        _act(session, rollout, Action.KILL, actor, reason, publisher)
        return Answer(True, "killed")
    promoted = _finish(session, rollout, ControllerKind.ARGO_ROLLOUTS, actor, reason, publisher)
    return Answer(True, promoted)


def _report(
    session: Session,
    rollout: Rollout,
    hook: FlaggerHook,
    payload: FlaggerPayload,
    publisher: Publisher | None,
) -> Answer:
    actor = flagger_actor(payload)
    if hook is FlaggerHook.EVENT:
        return _event(session, rollout, actor, payload)
    if payload.phase == "Failed":
        _act(session, rollout, Action.KILL, actor, "Flagger post-rollout: Failed", publisher)
        return Answer(True, "killed: Flagger rolled the canary back")
    if payload.phase == "Succeeded":
        reason = "Flagger post-rollout: Succeeded"
        promoted = _finish(session, rollout, ControllerKind.FLAGGER, actor, reason, publisher)
        return Answer(True, promoted)
    return Answer(True, f"recorded phase {payload.phase or 'none'}")


def _event(session: Session, rollout: Rollout, actor: str, payload: FlaggerPayload) -> Answer:
    # Normal events (a check passed, an iteration advanced) come every interval: the hook
    # call is their check-in. Warnings (halts, rollbacks) are what a person looks for.
    kind = str(payload.metadata.get("eventType", ""))[:16]
    if kind != EVENT_WARNING:
        return Answer(True, "noted: an event never changes the rollout")
    message = str(payload.metadata.get("eventMessage", ""))[:500]
    audit.record(
        session,
        actor=redact(actor),
        action="controller.event",
        reason=redact(f"Flagger {kind} (Canary phase {payload.phase or 'none'}): {message}"),
        rollout_id=rollout.id,
        # No state: an event is never the reason of the rollout's state (`last_change`).
        details={"phase": payload.phase[:64], "event_type": kind, "state": rollout.state.value},
    )
    return Answer(True, "recorded: an event never changes the rollout")


def _finish(
    session: Session,
    rollout: Rollout,
    controller: ControllerKind,
    actor: str,
    reason: str,
    publisher: Publisher | None,
) -> str:
    # The controller promoted: its stable Service (specgate's baseline route) now serves the
    # new revision and the canary one empties. PROMOTED would route the alias to the
    # candidate route, the emptied canary, so specgate holds (baseline only) and says why.
    why = f"{PROMOTED_BY}{controller.value}: {reason}"
    if rollout.state is RolloutState.RUNNING:
        _act(session, rollout, Action.HOLD, actor, why, publisher)
    elif rollout.state is RolloutState.HELD and links.held_by_watch(session, rollout_id=rollout.id):
        # Polls end with the analysis step, so the watch may hold before the completion: the
        # state is right, the reason is not; record the promotion as what holds it now.
        audit.record(
            session,
            actor=actor,
            action="controller.promoted",
            reason=redact(why),
            rollout_id=rollout.id,
            from_state=rollout.state.value,
            to_state=rollout.state.value,
        )
    else:
        return f"nothing to do: rollout is {rollout.state.value}"
    return "held: promoted by the controller; the baseline route now serves the new revision"


def _ready(rollout: Rollout, routes: list[Route], probe: Probe) -> Answer:
    if rollout.state in (RolloutState.KILLED, RolloutState.PROMOTED):
        return Answer(
            False, f"rollout is {rollout.state.value}: create a new one for this revision"
        )
    problems = [f"{route.name}: {why}" for route in routes if (why := probe(route)) is not None]
    return Answer(not problems, "; ".join(problems) or "routes reachable")


def _act(
    session: Session,
    rollout: Rollout,
    action: Action,
    actor: str,
    reason: str,
    publisher: Publisher | None,
) -> None:
    # Controllers quote their webhook URL, token included, in their messages: never store it.
    routing.change_state(
        session,
        rollout_id=rollout.id,
        action=action,
        actor=redact(actor),
        reason=redact(reason),
        publisher=publisher,
    )
