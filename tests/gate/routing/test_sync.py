"""Routing state reaches every gateway: pushed by Redis pub/sub before any poll, and by
polling when Redis is down."""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import aclosing, contextmanager
from urllib.parse import urlparse

import pytest
import redis
from sqlalchemy.orm import sessionmaker

from gate.db.engine import make_engine
from gate.db.enums import RolloutState
from gate.db.models import Rollout
from gate.rollouts import service
from gate.rollouts.states import BASELINE_ONLY, Action
from gate.routing import service as routing_service
from gate.routing.pubsub import RedisPublisher, RedisSubscriber, RoutingChange, channel_for
from gate.routing.sync import RoutingState, db_loader
from tests import factories
from tests.servers import TcpProxy, closed_port
from tests.waits import wait_until


@contextmanager
def gateway_state(factory, *, redis_url, poll_interval_s=30.0):
    """A RoutingState running in its own thread and event loop, like a gateway process."""
    state = RoutingState(
        db_loader(factory),
        poll_interval_s=poll_interval_s,
        stale_after_s=120,
        subscriber=RedisSubscriber(redis_url, deployment="d1", retry_s=0.2),
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(state.start(), loop).result(10)
    try:
        yield state
    finally:
        asyncio.run_coroutine_threadsafe(state.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def wait_for_state(states, alias, wanted, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(s.lookup(alias) and s.lookup(alias).state is wanted for s in states):
            return time.monotonic()
        time.sleep(0.01)
    raise AssertionError(f"not all gateways saw {wanted} within {timeout}s")


@pytest.fixture
def running_rollout(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path}/r.db")
    from gate.db import migrate

    migrate.upgrade(f"sqlite:///{tmp_path}/r.db")
    factory = sessionmaker(engine, expire_on_commit=False)
    with factory() as session, session.begin():
        rollout = factories.running_rollout(session)
    yield factory, rollout.id
    engine.dispose()


@pytest.mark.redis
def test_a_kill_reaches_two_gateways_over_redis_before_any_poll(running_rollout, redis_url):
    factory, rollout_id = running_rollout
    with (
        gateway_state(factory, redis_url=redis_url) as a,
        gateway_state(factory, redis_url=redis_url) as b,
    ):
        wait_for_state([a, b], "r1", RolloutState.RUNNING, 5)
        assert wait_until(lambda: a.pubsub_connected and b.pubsub_connected, timeout=10)
        with factory() as session, session.begin():
            routing_service.change_state(
                session,
                rollout_id=rollout_id,
                action=Action.KILL,
                actor="key:oncall",
                reason="bad acceptance",
                publisher=RedisPublisher(redis_url, deployment="d1"),
            )
        # The gateways poll every 30 s: seen sooner, the kill was pushed.
        wait_for_state([a, b], "r1", RolloutState.KILLED, 10.0)


def test_with_redis_down_the_kill_arrives_by_polling(running_rollout):
    factory, rollout_id = running_rollout
    down = f"redis://127.0.0.1:{closed_port()}/0"
    with (
        gateway_state(factory, redis_url=down, poll_interval_s=0.3) as a,
        gateway_state(factory, redis_url=down, poll_interval_s=0.3) as b,
    ):
        wait_for_state([a, b], "r1", RolloutState.RUNNING, 5)
        with factory() as session, session.begin():
            routing_service.change_state(
                session,
                rollout_id=rollout_id,
                action=Action.KILL,
                actor="key:oncall",
                reason="redis is down",
                publisher=RedisPublisher(down, deployment="d1"),
            )
        wait_for_state([a, b], "r1", RolloutState.KILLED, 10.0)


def test_a_stale_message_never_undoes_a_newer_state(running_rollout):
    factory, rollout_id = running_rollout
    state = RoutingState(db_loader(factory), poll_interval_s=30, stale_after_s=120)
    asyncio.run(state.refresh())
    version = state.lookup("r1").version
    state.apply(RoutingChange(rollout_id, "killed", version + 1))
    state.apply(RoutingChange(rollout_id, "running", version))  # older, arrives late
    assert state.lookup("r1").state is RolloutState.KILLED
    assert state.plan(state.lookup("r1")).mirror is False


def test_a_garbled_message_means_reload():
    assert RoutingChange.decode(b"\xff not json") == RoutingChange(None)


def test_a_pushed_resume_never_moves_a_killed_rollout_back_into_routing(running_rollout):
    factory, rollout_id = running_rollout
    with factory() as session, session.begin():
        service.transition(
            session, rollout_id=rollout_id, action=Action.KILL, actor="t", reason="t"
        )
    state = RoutingState(db_loader(factory), poll_interval_s=30, stale_after_s=120)
    asyncio.run(state.refresh())
    version = state.lookup("r1").version
    state.apply(RoutingChange(rollout_id, "running", version + 5))
    assert state.lookup("r1").state is RolloutState.KILLED
    assert state.lookup("r1").killed_at > 0, "alerts read the kill's time from the database"


def test_a_read_begun_before_a_pushed_kill_keeps_it_and_a_read_begun_after_replaces_it(
    running_rollout,
):
    factory, rollout_id = running_rollout
    load = db_loader(factory)
    read_done, release = threading.Event(), threading.Event()

    def slow_load():
        snapshot = load()
        read_done.set()
        release.wait(10)
        return snapshot

    state = RoutingState(slow_load, poll_interval_s=30, stale_after_s=120)
    release.set()
    asyncio.run(state.refresh())
    version = state.lookup("r1").version

    async def push_during_a_read() -> None:
        read_done.clear()
        release.clear()
        reading = asyncio.create_task(state.refresh())
        await asyncio.to_thread(read_done.wait, 10)
        state.apply(RoutingChange(rollout_id, "killed", version + 1))
        release.set()
        await reading

    asyncio.run(push_during_a_read())
    assert state.lookup("r1").state is RolloutState.KILLED, "a slow read undid the kill"
    asyncio.run(state.refresh())
    assert state.lookup("r1").state is RolloutState.RUNNING, "the database is the authority"


def test_a_stored_policy_that_no_longer_validates_routes_baseline_only(running_rollout):
    factory, rollout_id = running_rollout
    with factory() as session, session.begin():
        other = factories.rollout(session, name="r2")
        session.get(Rollout, rollout_id).policy = {"stages": [10, 10, 100]}
    state = RoutingState(db_loader(factory), poll_interval_s=30, stale_after_s=120)
    assert asyncio.run(state.refresh()), "one bad row must not fail the whole load"
    assert state.plan(state.lookup("r1")) == BASELINE_ONLY
    assert state.lookup("r2").rollout_id == other.id


@pytest.mark.redis
def test_a_subscriber_reloads_only_once_redis_holds_its_subscription(redis_url):
    """A (re)subscribing gateway reloads everything and says it is connected. Both wait for
    Redis to confirm the SUBSCRIBE: a change committed after the reload's read and
    published before Redis took the subscription would otherwise be lost until the next
    poll. The SUBSCRIBE is held on its way to Redis; nothing may be reloaded meanwhile."""
    target = urlparse(redis_url)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 6379)
    proxy.hold(b"SUBSCRIBE")
    through = redis_url.replace(target.netloc, f"127.0.0.1:{proxy.port}")
    subscriber = RedisSubscriber(through, deployment="d-held", retry_s=0.2)
    direct = redis.Redis.from_url(redis_url)
    seen: list[tuple[RoutingChange, bool, int]] = []

    async def first() -> None:
        async with aclosing(subscriber.changes()) as changes:
            async for change in changes:
                ((_, subscribed),) = direct.pubsub_numsub(channel_for("d-held"))
                seen.append((change, subscriber.connected, subscribed))
                return

    reader = threading.Thread(target=asyncio.run, args=(first(),), daemon=True)
    reader.start()
    try:
        assert proxy.holding.wait(10)
        assert not wait_until(lambda: seen, timeout=1)  # the SUBSCRIBE is not in Redis yet
        assert not subscriber.connected
        proxy.restore()
        assert wait_until(lambda: seen, timeout=10)
        assert seen == [(RoutingChange(None), True, 1)]
    finally:
        proxy.close()
        reader.join(10)
        direct.close()
