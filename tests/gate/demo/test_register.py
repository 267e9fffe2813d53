"""The demo records its routes as it starts their engines."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from typer.testing import CliRunner

from gate.cli import app
from gate.db.engine import make_engine, session_factory
from gate.db.enums import RouteRole
from gate.db.models import Rollout, Route
from gate.demo.run import DemoOptions, _register


@dataclass(frozen=True)
class Started:
    base_url: str


def test_the_candidate_route_records_the_draft_length_its_engine_was_started_with(sqlite_url):
    sessions = session_factory(make_engine(sqlite_url))
    engines = {
        RouteRole.BASELINE: Started("http://127.0.0.1:1/v1"),
        RouteRole.CANDIDATE: Started("http://127.0.0.1:2/v1"),
    }
    options = DemoOptions(num_speculative_tokens=3)
    _register(sessions, engines, options, {}, None)
    with sessions() as db:
        routes = {r.role: r for r in db.scalars(select(Route))}
    assert routes[RouteRole.CANDIDATE].spec_tokens == 3
    assert routes[RouteRole.BASELINE].spec_tokens is None


def test_with_arms_one_rollout_mirrors_to_an_ngram_route_per_draft_length(sqlite_url):
    sessions = session_factory(make_engine(sqlite_url))
    engines = {RouteRole.BASELINE: Started("http://127.0.0.1:1/v1")}
    arms = {f"k{k}": Started(f"http://127.0.0.1:{10 + k}/v1") for k in (2, 4, 8)}
    rollout_id, _ = _register(sessions, engines, DemoOptions(arms=(2, 4, 8)), {}, None, arms=arms)
    with sessions() as db:
        rollout = db.get(Rollout, rollout_id)
        assert rollout is not None
        got = {a.name: (a.route.spec_tokens, a.route.base_url) for a in rollout.arms}
        routes = db.scalars(select(Route)).all()
    assert got == {f"k{k}": (k, f"http://127.0.0.1:{10 + k}/v1") for k in (2, 4, 8)}
    assert [r.spec_tokens for r in routes if r.role is RouteRole.BASELINE] == [None]


def test_demo_arms_and_engine_timeout_reach_the_run(monkeypatch, tmp_path):
    seen: list[DemoOptions] = []

    def fake_run(settings, options, console):
        seen.append(options)
        raise KeyboardInterrupt  # stop before anything would be shown

    monkeypatch.setattr("gate.cli.demo.run_demo", fake_run)
    monkeypatch.chdir(tmp_path)
    got = CliRunner().invoke(app, ["demo", "--arms", "2,4,8", "--engine-timeout", "600"])
    assert got.exit_code == 130, got.output
    assert seen[0].arms == (2, 4, 8) and seen[0].engine_timeout_s == 600
    got = CliRunner().invoke(app, ["demo"])
    assert seen[1].arms == () and seen[1].engine_timeout_s == 180
