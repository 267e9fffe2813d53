"""The demo moves its rollout through the routing service, so gateways hear of it."""

from __future__ import annotations

import redis

from gate.db.engine import make_engine, session_factory, transaction
from gate.demo.run import _finish
from gate.routing.deployment import publisher, read_deployment
from gate.routing.pubsub import RoutingChange, channel_for
from gate.settings import Settings
from tests import factories
from tests.waits import wait_until


def test_holding_the_demo_rollout_is_published_to_the_gateways(sqlite_url, redis_url, tmp_path):
    sessions = session_factory(make_engine(sqlite_url))
    with sessions() as db, db.begin():
        rollout = factories.running_rollout(db, name="demo")
        deployment = read_deployment(db)
    listener = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    listener.subscribe(channel_for(deployment))
    settings = Settings(home=tmp_path, database_url=sqlite_url, redis_url=redis_url)
    with transaction(sessions) as db:
        _finish(db, rollout.id, publisher(settings, sessions))
    heard: list[RoutingChange] = []

    def received() -> bool:
        message = listener.get_message(timeout=0.1)
        if message is not None:
            heard.append(RoutingChange.decode(message["data"]))
        return bool(heard)

    assert wait_until(received, timeout=10)
    assert (heard[0].rollout_id, heard[0].state) == (rollout.id, "held")
    listener.close()
