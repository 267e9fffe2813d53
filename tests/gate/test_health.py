"""Reachability checks against the real services and against closed ports."""

from __future__ import annotations

import pytest

from gate.db.engine import make_engine
from gate.health import database_health, redis_health


@pytest.mark.redis
def test_redis_health_on_the_real_server(redis_url):
    assert redis_health(redis_url).ok


def test_redis_health_reports_a_closed_port_with_masked_password():
    health = redis_health("redis://:s3cret@127.0.0.1:1/0", timeout_s=0.5)
    assert not health.ok and "s3cret" not in health.detail and "127.0.0.1:1" in health.detail


def test_no_redis_means_in_process_mode():
    assert redis_health(None).ok


@pytest.mark.postgres
def test_database_health(pg_engine):
    assert database_health(pg_engine).ok
    down = database_health(make_engine("postgresql://u:pw@127.0.0.1:1/x"))
    assert not down.ok and "pw@" not in down.detail
