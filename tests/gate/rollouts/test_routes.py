"""Route registration a deploy job can re-run, and removal of unused routes (real Postgres)."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import func, insert, select, text

from gate.db.base import utcnow
from gate.db.enums import RouteRole
from gate.db.models import AuditEvent, EngineSample, Route
from gate.errors import Conflict, NotFound
from gate.rollouts import routes
from gate.rollouts.routes import Registered
from gate.rollouts.schemas import RouteIn
from tests import factories

pytestmark = pytest.mark.postgres
SPEC = RouteIn(
    name="llama-spec-0123abcd",
    base_url="http://spec:8000/v1/",
    model="llama-8b",
    role=RouteRole.CANDIDATE,
    metrics_url="http://spec:8000/metrics",
    spec_method="ngram",
)


def test_the_same_spec_again_is_a_no_op(pg_session):
    first, done = routes.register_route(pg_session, spec=SPEC, actor="ci")
    again, done_again = routes.register_route(pg_session, spec=SPEC, actor="ci")
    assert (done, done_again) == (Registered.CREATED, Registered.UNCHANGED)
    assert again.id == first.id and again.base_url == "http://spec:8000/v1"
    assert pg_session.scalar(select(func.count()).select_from(Route)) == 1


def test_another_spec_under_the_name_is_refused_with_what_differs(pg_session):
    routes.register_route(pg_session, spec=SPEC, actor="ci")
    other = SPEC.model_copy(update={"spec_method": "eagle3", "base_url": "http://b:8000/v1"})
    with pytest.raises(Conflict, match=r"another base_url, spec_method; .*--update"):
        routes.register_route(pg_session, spec=other, actor="ci")
    route, done = routes.register_route(pg_session, spec=other, actor="ci", update=True)
    assert done is Registered.UPDATED
    assert (route.spec_method, route.base_url) == ("eagle3", "http://b:8000/v1")
    actions = pg_session.scalars(select(AuditEvent.action).order_by(AuditEvent.id)).all()
    assert actions == ["route.create", "route.update"]


def test_a_route_a_rollout_uses_is_neither_updated_nor_removed(pg_session):
    rollout = factories.rollout(pg_session, name="used")
    spec = RouteIn(
        name="used-spec", base_url="http://elsewhere:1/v1", model="m", role=RouteRole.CANDIDATE
    )
    with pytest.raises(Conflict, match=r"cannot update route 'used-spec': 1 rollout\(s\) use it"):
        routes.register_route(pg_session, spec=spec, actor="ci", update=True)
    with pytest.raises(Conflict, match=r"cannot remove route 'used-base'.*\(used\)"):
        routes.remove_route(pg_session, name="used-base", actor="ci")
    assert pg_session.get(Route, rollout.baseline_route_id) is not None


def test_an_unused_route_is_removed_with_its_engine_samples(pg_session):
    route, _ = routes.register_route(pg_session, spec=SPEC, actor="ci")
    pg_session.execute(
        insert(EngineSample),
        [{"route_id": route.id, "metric": "m", "value": 1.0, "labels": {}, "scraped_at": utcnow()}],
    )
    routes.remove_route(pg_session, name=SPEC.name, actor="ci")
    pg_session.expire_all()
    assert pg_session.scalar(select(func.count()).select_from(Route)) == 0
    assert pg_session.scalar(select(func.count()).select_from(EngineSample)) == 0
    with pytest.raises(NotFound):
        routes.remove_route(pg_session, name=SPEC.name, actor="ci")
    # Removed, the name is free for a new registration.
    assert routes.register_route(pg_session, spec=SPEC, actor="ci")[1] is Registered.CREATED


def test_the_cli_adds_again_updates_and_removes(sqlite_url):
    from typer.testing import CliRunner

    from gate.cli import app

    def routes_cli(*args: str):
        return CliRunner().invoke(app, ["routes", *args, "--database-url", sqlite_url])

    add = ["add", "--name", "c1", "--model", "m", "--role", "candidate", "--base-url"]
    assert "[created]" in routes_cli(*add, "http://a:1/v1").output
    assert "[unchanged]" in routes_cli(*add, "http://a:1/v1").output
    refused = routes_cli(*add, "http://b:1/v1")
    assert isinstance(refused.exception, Conflict) and "another base_url" in str(refused.exception)
    assert "[updated]" in routes_cli(*add, "http://b:1/v1", "--update").output
    assert routes_cli("remove", "c1").output.strip() == "route c1 removed"
    assert "c1" not in routes_cli("list").output


def test_two_jobs_registering_the_same_route_at_once_both_succeed(pg_committing, pg_engine):
    """The second insert waits on the first's unique key, fails when it commits, and then
    finds the same spec: unchanged, not an error."""
    first = pg_committing()
    first.begin()
    routes.register_route(first, spec=SPEC, actor="ci-1")
    outcome: list[object] = []

    def second() -> None:
        try:
            with pg_committing() as db, db.begin():
                outcome.append(routes.register_route(db, spec=SPEC, actor="ci-2")[1])
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=second)
    thread.start()
    deadline = time.monotonic() + 30
    with pg_engine.connect() as watcher:
        while not watcher.scalar(WAITING_ON_A_LOCK) and time.monotonic() < deadline:
            watcher.rollback()  # pg_stat_activity is read once per transaction: a fresh look
            time.sleep(0.05)
    first.commit()
    first.close()
    thread.join(30)
    assert outcome == [Registered.UNCHANGED]


WAITING_ON_A_LOCK = text(
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
)
