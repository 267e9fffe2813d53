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
        self.refresh_failures = 0

    @property
    def snapshot(self) -> RoutingSnapshot:
        """Return the current snapshot."""
        return self._snapshot

    def lookup(self, alias: str) -> RolloutRouting | None:
        """Return the routing of `alias`, or None when no rollout owns it."""
        return self._snapshot.by_alias.get(alias)

    def is_stale(self) -> bool:
        """Whether the last good database read is older than the staleness bound."""
        return self._clock() - self._snapshot.loaded_at > self._stale_after_s

    def plan(self, routing: RolloutRouting) -> RoutingPlan:
        """Return the plan to apply now: baseline only when the state is stale."""
        return BASELINE_ONLY if self.is_stale() else routing.plan

    async def refresh(self) -> bool:
        """Reload from the database; keep the old snapshot (aging toward stale) on failure."""
        try:
            snapshot = await asyncio.to_thread(self._load)
        except Exception as exc:  # any DB failure: degrade, never crash the gateway
            self.refresh_failures += 1
            log.warning("routing_refresh_failed error=%s", str(exc).splitlines()[0])
            return False
        # A pub/sub change applied while the read was in flight must not be undone.
        self._snapshot = _keep_newer(snapshot, self._snapshot)
        return True

    def apply(self, change: RoutingChange) -> None:
        """Apply a published state change at once (the full reload follows)."""
        if change.rollout_id is not None and change.state is not None:
            try:
                state = RolloutState(change.state)
            except ValueError:
                return
            self._snapshot = self._snapshot.with_state(change.rollout_id, state, change.version)

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


def _keep_newer(loaded: RoutingSnapshot, current: RoutingSnapshot) -> RoutingSnapshot:
    by_alias = dict(loaded.by_alias)
    for alias, routing in current.by_alias.items():
        fresh = by_alias.get(alias)
        newer = fresh is not None and fresh.rollout_id == routing.rollout_id
        if newer and fresh is not None and routing.version > fresh.version:
            by_alias[alias] = routing
    return RoutingSnapshot(by_alias=by_alias, loaded_at=loaded.loaded_at)
