"""Change notifications for routing state: Redis pub/sub, or in-process for the embedded mode."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, replace
from typing import Protocol

import redis
import redis.asyncio as aioredis

CHANNEL_PREFIX = "specgate:routing:"
log = logging.getLogger(__name__)


# A deployment id, or a function that reads it (from the database) when first needed.
Identity = str | Callable[[], str]


def resolve(identity: Identity) -> str:
    """Return the deployment id, reading it if needed."""
    return identity if isinstance(identity, str) else identity()


def channel_for(deployment: str) -> str:
    """Return the pub/sub channel of one deployment (Redis channels ignore the DB number)."""
    return CHANNEL_PREFIX + deployment


@dataclass(frozen=True)
class RoutingChange:
    """A rollout moved to `state` at `version`; rollout_id None means reload everything."""

    rollout_id: int | None
    state: str | None = None
    version: int = 0
    deployment: str = ""

    def encode(self) -> str:
        """Return the wire form."""
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, raw: str | bytes) -> RoutingChange:
        """Parse the wire form; unknown or bad payloads mean 'reload everything'."""
        try:
            data = json.loads(raw)
            return cls(
                data.get("rollout_id"),
                data.get("state"),
                int(data.get("version", 0)),
                str(data.get("deployment", "")),
            )
        except (ValueError, TypeError, AttributeError):
            return cls(None)


class Publisher(Protocol):
    def publish(self, change: RoutingChange) -> None: ...


class Subscriber(Protocol):
    connected: bool

    def changes(self) -> AsyncIterator[RoutingChange]: ...


class RedisPublisher:
    """Publish changes on Redis; a Redis outage is logged, never raised (gateways poll)."""

    def __init__(self, url: str, *, deployment: Identity) -> None:
        self._client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        self._deployment = deployment

    def publish(self, change: RoutingChange) -> None:
        """Send one change to every subscribed gateway of this deployment."""
        try:
            deployment = resolve(self._deployment)
            stamped = replace(change, deployment=deployment)
            self._client.publish(channel_for(deployment), stamped.encode())
        except Exception as exc:  # Redis or the identity's DB read: gateways poll anyway
            log.warning("routing_publish_failed error=%s", str(exc).splitlines()[0])


class RedisSubscriber:
    """Yield changes from Redis, reconnecting after outages."""

    def __init__(self, url: str, *, deployment: Identity, retry_s: float = 1.0) -> None:
        self._url = url
        self._deployment = deployment
        self._retry_s = retry_s
        self.connected = False

    async def changes(self) -> AsyncIterator[RoutingChange]:
        """Yield changes forever; after a reconnect yield a full reload first."""
        while True:
            try:
                deployment = await asyncio.to_thread(resolve, self._deployment)
                async for change in self._subscribe(deployment):
                    yield change
            except Exception as exc:  # Redis down, or the identity's DB read failed: retry
                log.warning("routing_subscribe_failed error=%s", str(exc).splitlines()[0])
            finally:
                self.connected = False
            await asyncio.sleep(self._retry_s)

    async def _subscribe(self, deployment: str) -> AsyncIterator[RoutingChange]:
        client = aioredis.Redis.from_url(self._url, socket_connect_timeout=1)
        try:
            async with client.pubsub() as pubsub:
                await pubsub.subscribe(channel_for(deployment))  # sent, not yet confirmed
                async for message in pubsub.listen():
                    if message.get("type") == "subscribe":
                        # Redis holds the subscription: every change published from now
                        # on reaches us, so a full reload read now misses none.
                        self.connected = True
                        yield RoutingChange(None)
                        continue
                    if message.get("type") != "message":
                        continue
                    change = RoutingChange.decode(message["data"])
                    # Another deployment's message on a shared server is not ours to apply.
                    if change.deployment == deployment:
                        yield change
        finally:
            await client.aclose()


class LocalBus:
    """In-process publisher and subscriber, for the embedded default and tests."""

    connected = True  # in-process: nothing to lose

    def __init__(self) -> None:
        self._queues: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[RoutingChange]]] = []

    def publish(self, change: RoutingChange) -> None:
        """Deliver a change to every subscriber, from any thread."""
        for loop, queue in list(self._queues):
            loop.call_soon_threadsafe(queue.put_nowait, change)

    async def changes(self) -> AsyncIterator[RoutingChange]:
        """Yield changes published after subscribing."""
        queue: asyncio.Queue[RoutingChange] = asyncio.Queue()
        entry = (asyncio.get_running_loop(), queue)
        self._queues.append(entry)
        try:
            while True:
                yield await queue.get()
        finally:
            self._queues.remove(entry)
