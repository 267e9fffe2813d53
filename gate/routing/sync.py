"""The gateway's in-memory routing state, refreshed by pub/sub and by polling the database."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from gate.db.enums import RolloutState
from gate.rollouts.states import BASELINE_ONLY, RoutingPlan
from gate.routing.credentials import DEFAULT_SECRETS_DIR
from gate.routing.pubsub import RoutingChange, Subscriber
from gate.routing.snapshot import RolloutRouting, RoutingSnapshot, load_snapshot

log = logging.getLogger(__name__)
# States a push may apply before the database is read: they only take traffic away.
_RESTRICTING = frozenset({RolloutState.KILLED.value, RolloutState.HELD.value})
Clock = Callable[[], float]


def db_loader(
    factory: sessionmaker[Session],
    clock: Clock = time.monotonic,
    secrets_dir: Path = DEFAULT_SECRETS_DIR,
) -> Callable[[], RoutingSnapshot]:
    """Return a function that reads a fresh snapshot from the database (route credentials
    read from `secrets_dir`)."""

    def load() -> RoutingSnapshot:
        started = clock()
        with factory() as session:
            return load_snapshot(session, loaded_at=started, secrets_dir=secrets_dir)

    return load


class RoutingState:
    """Routing state for one gateway process. Reads never block and never touch the DB."""

    def __init__(
        self,
        load: Callable[[], RoutingSnapshot],
        *,
        poll_interval_s: float,
        stale_after_s: float,
        subscriber: Subscriber | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._load = load
        self._poll_interval_s = poll_interval_s
        self._stale_after_s = stale_after_s
        self._subscriber = subscriber
        self._clock = clock
        self._snapshot = RoutingSnapshot()
        self._tasks: list[asyncio.Task[None]] = []
        # Pushed kills and holds by rollout id, numbered in arrival order.
        self._pushes = 0
        self._pushed: dict[int, int] = {}
        self.refresh_failures = 0
        self.loaded = False

    @property
    def snapshot(self) -> RoutingSnapshot:
        """Return the current snapshot."""
        return self._snapshot

    def lookup(self, alias: str) -> RolloutRouting | None:
        """Return the routing of `alias`, or None when no rollout owns it."""
        return self._snapshot.by_alias.get(alias)

    @property
    def pubsub_connected(self) -> bool:
        """Whether pushed changes can arrive now (without them, polling carries every change)."""
        return self._subscriber is None or self._subscriber.connected

    def is_stale(self) -> bool:
        """Whether the last good database read is older than the staleness bound."""
        return self._clock() - self._snapshot.loaded_at > self._stale_after_s

    def plan(self, routing: RolloutRouting) -> RoutingPlan:
        """Return the plan to apply now: baseline only when the state is stale."""
        return BASELINE_ONLY if self.is_stale() else routing.plan

    def current_plan(self, alias: str, rollout_id: int) -> RoutingPlan:
        """Return the plan for `rollout_id` now (baseline only once another owns `alias`)."""
        routing = self.lookup(alias)
        if routing is None or routing.rollout_id != rollout_id:
            return BASELINE_ONLY
        return self.plan(routing)

    def arm_active(self, alias: str, rollout_id: int, arm: str) -> bool:
        """Whether `arm` of `rollout_id` is still one the gateway mirrors to."""
        routing = self.lookup(alias)
        if routing is None or routing.rollout_id != rollout_id:
            return False
        return any(active.name == arm for active in routing.arms)

    async def refresh(self) -> bool:
        """Reload from the database; keep the old snapshot (aging toward stale) on failure."""
        pushes_before = self._pushes
        try:
            snapshot = await asyncio.to_thread(self._load)
        except Exception as exc:  # any DB failure: degrade, never crash the gateway
            self.refresh_failures += 1
            log.warning("routing_refresh_failed error=%s", str(exc).splitlines()[0])
            return False
        self._snapshot = self._merge(snapshot, pushes_before)
        self.loaded = True
        return True

    def apply(self, change: RoutingChange) -> None:
        """Apply a pushed kill or hold at once; other pushes wait for the reload that follows.

        The database is the authority: a push can take traffic away before the next read,
        never bring it back (a resume or start is seen when the database is read).
        """
        if change.rollout_id is None or change.state not in _RESTRICTING:
            return
        before = self._snapshot
        self._snapshot = before.with_state(
            change.rollout_id, RolloutState(change.state), change.version
        )
        if self._snapshot != before:
            self._pushes += 1
            self._pushed[change.rollout_id] = self._pushes

    def _merge(self, loaded: RoutingSnapshot, pushes_before: int) -> RoutingSnapshot:
        """Take the database's state, except a push applied after that read began."""
        later = {rid for rid, seq in self._pushed.items() if seq > pushes_before}
        self._pushed = {rid: seq for rid, seq in self._pushed.items() if rid in later}
        by_alias = dict(loaded.by_alias)
        for alias, routing in self._snapshot.by_alias.items():
            fresh = by_alias.get(alias)
            if routing.rollout_id in later and fresh and fresh.rollout_id == routing.rollout_id:
                # The read may predate the kill: a slow poll must not undo it.
                by_alias[alias] = routing if fresh.state.value not in _RESTRICTING else fresh
        return RoutingSnapshot(by_alias=by_alias, loaded_at=loaded.loaded_at)

    async def start(self) -> None:
        """Load once, then keep polling and listening in background tasks."""
        await self.refresh()
        self._tasks.append(asyncio.create_task(self._poll()))
        if self._subscriber is not None:
            self._tasks.append(asyncio.create_task(self._listen(self._subscriber)))

    async def stop(self) -> None:
        """Cancel the background tasks."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._poll_interval_s)
            await self.refresh()

    async def _listen(self, subscriber: Subscriber) -> None:
        async for change in subscriber.changes():
            self.apply(change)
            await self.refresh()
