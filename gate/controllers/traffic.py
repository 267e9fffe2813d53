"""Traffic links: specgate drives the Kubernetes traffic objects of a rollout itself.

Each pass reads the objects, and writes what the rollout's state and stage say, as a
careful operator would:

- running: the speculative backend gets the stage's share as weight in canary (none in
  shadow), and a RequestMirror filter mirrors the stage's share to it where the gateway
  supports it; promoted: all weight to it, mirror removed; killed: weight 0 (HTTPRoute) or
  `serving.kserve.io/stop` (LLMInferenceService), mirror removed; pending and held: nothing
  is written (a hold freezes the objects as they are);
- a weight is only given to a backend that exists; every write is a server dry-run first,
  then a PUT carrying the resourceVersion read (a 409 is retried after reading again);
- a change counts as applied only when the status conditions say so at its generation
  (HTTPRoute: every parent Accepted and ResolvedRefs; LLMInferenceService: observed and
  Ready); no further change is made until then, and a condition that says False holds;
- the fields specgate owns are compared with what it last wrote: an edit by anyone else
  holds a running rollout (never overwritten; relinking accepts the edit), except that a
  kill not yet applied is always written;
- an API server it cannot reach holds a running rollout: it never promotes blind.

Every write and every confirmation is in the audit trail with the object's resourceVersion.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gate import audit
from gate.controllers import objects
from gate.controllers.kube import Body, KubeApi, KubeError, KubeUnreachable
from gate.controllers.objects import Desired, Driver, Hold, Objects
from gate.controllers.targets import HttpRouteTarget, KServeTarget, Target
from gate.db.enums import RolloutMode, RolloutState
from gate.db.models import AuditEvent, ControllerKind, ControllerLink, Rollout
from gate.rollouts import repository
from gate.rollouts.exposure import exposure_of
from gate.rollouts.states import Action
from gate.routing import service as routing
from gate.routing.pubsub import Publisher

ACTOR = "specgate:traffic"
BLOCKED = "controller.traffic.blocked"
CONFLICT_RETRIES = 3
TARGET = TypeAdapter(Target)


def parse_target(raw: dict[str, Any]) -> HttpRouteTarget | KServeTarget:
    """Return the link's target as its typed value."""
    return TARGET.validate_python(raw)


def desired_of(rollout: Rollout, target: HttpRouteTarget | KServeTarget) -> Desired | None:
    """What the objects should say for the rollout now; None: write nothing."""
    state = rollout.state
    if state is RolloutState.RUNNING:
        share = exposure_of(rollout).share
        weight = round(share * objects.TOTAL) if rollout.mode is RolloutMode.CANARY else 0
        if isinstance(target, KServeTarget):
            # KServe's docs: a member raised from weight 0 can drop connections.
            weight = max(weight, 1)
        return Desired(weight=weight, mirror=share, stop=False)
    if state is RolloutState.PROMOTED:
        return Desired(weight=objects.TOTAL, mirror=0.0, stop=False)
    if state is RolloutState.KILLED:
        return Desired(weight=0, mirror=0.0, stop=True)
    return None


def has_links(sessions: sessionmaker[Session]) -> bool:
    """Whether any rollout has a traffic link."""
    with sessions() as session:
        return bool(_link_ids(session))


def reconcile_all(
    sessions: sessionmaker[Session],
    *,
    api: KubeApi,
    publisher: Publisher | None,
    confirm_timeout_s: float = 10.0,
) -> int:
    """Run one pass over every traffic link, one transaction each; return how many writes."""
    with sessions() as session:
        ids = _link_ids(session)
    wrote = 0
    for rollout_id in ids:
        with sessions() as session, session.begin():
            changed = reconcile(session, rollout_id=rollout_id, api=api, publisher=publisher)
        wrote += changed
        if changed:
            _await_confirmation(
                sessions, rollout_id=rollout_id, api=api, publisher=publisher,
                timeout=confirm_timeout_s,
            )  # fmt: skip
    return wrote


def _await_confirmation(
    sessions: sessionmaker[Session],
    *,
    rollout_id: int,
    api: KubeApi,
    publisher: Publisher | None,
    timeout: float,
) -> None:
    """Poll the written objects' status until it confirms the change or `timeout` passes
    (the next pass confirms it then), one short transaction per look: the rollout's row is
    never locked while waiting, so a kill through the API never waits behind it."""
    deadline = time.monotonic() + timeout
    while True:
        with sessions() as session, session.begin():
            link = session.get(ControllerLink, rollout_id)
            rollout = repository.get_rollout(session, rollout_id, for_update=True)
            if link is None or link.target is None or rollout is None:
                return
            if not link.written or link.written.get("verified"):
                return
            driver = Driver(parse_target(link.target), api)
            try:
                _confirm(session, link=link, rollout=rollout, driver=driver, current=driver.read())
            except (KubeUnreachable, KubeError, Hold) as exc:
                _hold(session, rollout, _why_held(exc), publisher)
                return
            if link.written and link.written.get("verified"):
                return
        if time.monotonic() > deadline:
            return
        time.sleep(0.2)  # outside any transaction


def hold_all(sessions: sessionmaker[Session], *, publisher: Publisher | None, reason: str) -> None:
    """Hold every running rollout with a traffic link (no API server to drive them on)."""
    with sessions() as session:
        ids = _link_ids(session)
    for rollout_id in ids:
        with sessions() as session, session.begin():
            rollout = repository.get_rollout(session, rollout_id, for_update=True)
            if rollout is not None:
                _hold(
                    session,
                    rollout,
                    f"{reason}; specgate holds and never promotes blind",
                    publisher,
                )


def _link_ids(session: Session) -> list[int]:
    kind = ControllerLink.controller == ControllerKind.K8S_TRAFFIC
    return list(session.scalars(select(ControllerLink.rollout_id).where(kind)).all())


def reconcile(
    session: Session,
    *,
    rollout_id: int,
    api: KubeApi,
    publisher: Publisher | None,
) -> int:
    """One pass over one link's objects; return how many objects were written (their
    confirmation is awaited after the transaction, `_await_confirmation`)."""
    link = session.get(ControllerLink, rollout_id)
    rollout = repository.get_rollout(session, rollout_id, for_update=True)
    if link is None or link.target is None or rollout is None:
        return 0
    driver = Driver(parse_target(link.target), api)
    try:
        return _pass(session, link=link, rollout=rollout, driver=driver)
    except (KubeUnreachable, KubeError, Hold) as exc:
        _hold(session, rollout, _why_held(exc), publisher)
    return 0


def _why_held(exc: KubeUnreachable | KubeError | Hold) -> str:
    """Return the hold reason for a pass that could not go on."""
    if isinstance(exc, KubeUnreachable):
        return f"{exc.message}; specgate holds and never promotes blind"
    if isinstance(exc, KubeError):
        return f"the API server refused: {exc.message}"
    return str(exc)


def _pass(session: Session, *, link: ControllerLink, rollout: Rollout, driver: Driver) -> int:
    desired = desired_of(rollout, driver.target)
    if desired is None:
        return 0
    written = link.written or {}
    current = driver.read()
    killing = rollout.state is RolloutState.KILLED and written.get("state") != "killed"
    if written and driver.view(current) != written["view"] and not killing:
        return _edited(session, link=link, rollout=rollout, driver=driver, current=current)
    # A kill never waits for the previous change's confirmation.
    if written and not written.get("verified") and not killing:
        _confirm(session, link=link, rollout=rollout, driver=driver, current=current)
        if not link.written or not link.written.get("verified"):
            return 0
    return _write(session, link=link, rollout=rollout, driver=driver, desired=desired)


def _write(
    session: Session, *, link: ControllerLink, rollout: Rollout, driver: Driver, desired: Desired
) -> int:
    for _attempt in range(CONFLICT_RETRIES):
        current = driver.read()
        before = link.written["view"] if link.written else None
        if before is not None and driver.view(current) != before and not _is_kill(rollout):
            raise Hold(_edit_reason(driver, before, driver.view(current)))
        wanted = driver.apply(current, desired)
        changed = {n: b for n, b in wanted.items() if b != current[n]}
        if not changed:
            _remember(link, rollout, driver.view(current), verified=True, keep=True)
            return 0
        if desired.weight or desired.mirror:
            driver.require_backend()
        try:
            after = _put_all(driver, changed)
        except KubeError as exc:
            if exc.status == 409:
                continue
            raise Hold(f"the API server refused specgate's change: {exc.message}") from exc
        for name, body in after.items():
            _audit_write(session, rollout, driver, name, body, desired)
        _remember(link, rollout, driver.view({**current, **after}), verified=False)
        return len(after)
    raise Hold(f"{CONFLICT_RETRIES} writes in a row lost to a concurrent change (409)")


def _is_kill(rollout: Rollout) -> bool:
    return rollout.state is RolloutState.KILLED


def _put_all(driver: Driver, changed: Objects) -> Objects:
    # Dry-run every object first, so a refused change leaves nothing half applied.
    for name, body in changed.items():
        driver.api.replace(driver.ref(name), body, dry_run=True)
    return {n: driver.api.replace(driver.ref(n), b, dry_run=False) for n, b in changed.items()}


def _confirm(
    session: Session, *, link: ControllerLink, rollout: Rollout, driver: Driver, current: Objects
) -> None:
    checks = {name: driver.check(name, body) for name, body in current.items()}
    failed = [f"{driver.ref(n).describe()}: {c.failed}" for n, c in checks.items() if c.failed]
    if failed:
        raise Hold("specgate's change is not applied: " + "; ".join(failed))
    if all(c.applied for c in checks.values()):
        versions = {n: b["metadata"].get("resourceVersion") for n, b in current.items()}
        audit.record(
            session,
            actor=ACTOR,
            action="controller.traffic.applied",
            rollout_id=rollout.id,
            reason="status conditions confirm specgate's last change",
            details={"resource_versions": versions, "view": driver.view(current)},
        )
        _remember(link, rollout, link.written["view"] if link.written else {}, verified=True)


def _edited(
    session: Session, *, link: ControllerLink, rollout: Rollout, driver: Driver, current: Objects
) -> int:
    assert link.written is not None
    reason = _edit_reason(driver, link.written["view"], driver.view(current))
    if rollout.state is RolloutState.RUNNING:
        raise Hold(reason)
    # Promoted or killed and applied: the person's edit stands and becomes the new basis.
    audit.record(
        session,
        actor=ACTOR,
        action="controller.traffic.edited",
        rollout_id=rollout.id,
        reason=reason,
        details={"view": driver.view(current)},
    )
    _remember(link, rollout, driver.view(current), verified=True)
    return 0


def _edit_reason(driver: Driver, before: Any, after: Any) -> str:
    return (
        f"{driver.describe()} was edited outside specgate (specgate wrote {before}, it now"
        f" says {after}); specgate stops driving it: relink the rollout to accept the edit"
    )


def _remember(
    link: ControllerLink, rollout: Rollout, view: Any, *, verified: bool, keep: bool = False
) -> None:
    if keep and link.written and link.written.get("state") == rollout.state.value:
        verified = verified and bool(link.written.get("verified", True))
    link.written = {
        "view": view,
        "state": rollout.state.value,
        "stage": rollout.stage,
        "verified": verified,
    }


def _audit_write(
    session: Session, rollout: Rollout, driver: Driver, name: str, body: Body, desired: Desired
) -> None:
    audit.record(
        session,
        actor=ACTOR,
        action="controller.traffic.write",
        rollout_id=rollout.id,
        reason=f"{rollout.state.value} at stage {rollout.stage + 1}: {driver.ref(name).describe()}",
        details={
            "object": driver.ref(name).describe(),
            "resource_version": body["metadata"].get("resourceVersion"),
            "generation": body["metadata"].get("generation"),
            "weight": desired.weight,
            "weight_of": objects.TOTAL,
            "mirror": desired.mirror if driver.mirrors else None,
            "stop": desired.stop if isinstance(driver.target, KServeTarget) else None,
            "dry_run": "passed",
        },
    )


def _hold(session: Session, rollout: Rollout, reason: str, publisher: Publisher | None) -> None:
    if rollout.state is not RolloutState.RUNNING:
        if _last_blocked(session, rollout.id) == reason:
            return  # said once is enough: each pass would repeat it
        audit.record(
            session, actor=ACTOR, action=BLOCKED, rollout_id=rollout.id,
            reason=reason,
        )  # fmt: skip
        return
    routing.change_state(
        session,
        rollout_id=rollout.id,
        action=Action.HOLD,
        actor=ACTOR,
        reason=reason,
        publisher=publisher,
    )


def _last_blocked(session: Session, rollout_id: int) -> str | None:
    last = session.scalars(
        select(AuditEvent)
        .where(AuditEvent.rollout_id == rollout_id)
        .order_by(AuditEvent.id.desc())
        .limit(1)
    ).first()
    return last.reason if last is not None and last.action == BLOCKED else None
