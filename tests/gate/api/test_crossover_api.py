"""The crossover a rollout routed by load is routed by, in `GET /v1/rollouts/{id}/glance`:
what a router or an autoscaler reads beside the gateway's gauge."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest

from gate.db.enums import Decision
from gate.db.models import Verdict
from gate.rollouts import arms as rollout_arms
from gate.rollouts import service
from gate.rollouts.schemas import ArmIn, RolloutIn, RouteIn
from gate.rollouts.states import Action
from tests import factories
from tests.gate.rehearse.summaries import arms_summary

pytestmark = pytest.mark.postgres
BY_LOAD = {"stages": [100], "promotion": {"route_by_load": True, "hysteresis": 2}}


def by_load_rollout(pg_committing, *, promote: bool) -> int:
    with pg_committing() as db, db.begin():
        rollout = factories.running_rollout(db, name="by-load", policy=BY_LOAD)
        if promote:
            service.transition(
                db, rollout_id=rollout.id, action=Action.PROMOTE, actor="t", reason="t"
            )
        return rollout.id


def glance(api, rollout_id: int) -> dict:
    answer = api.client.get(f"/v1/rollouts/{rollout_id}/glance", headers=api.headers("read"))
    assert answer.status_code == 200, answer.text
    return answer.json()


def record(api, rollout_id: int, run_at: datetime) -> None:
    body = {**copy.deepcopy(factories.rehearsal_summary()), "run_at": run_at.isoformat()}
    path = f"/v1/rollouts/{rollout_id}/rehearsals"
    assert api.client.post(path, json=body, headers=api.headers("admin")).status_code == 201


def test_the_glance_shows_the_crossover_per_segment_and_its_source(api, pg_committing):
    rollout_id = by_load_rollout(pg_committing, promote=True)
    missing = glance(api, rollout_id)["crossover"]
    assert missing["source"] == "missing" and missing["segments"] == {"all": {"crossover": 0,
        "low": None, "high": None, "text": ""}}  # fmt: skip
    measured = datetime.now(UTC).replace(microsecond=0)
    record(api, rollout_id, measured)
    shown = glance(api, rollout_id)["crossover"]
    assert shown["routing_by_load"] and shown["source"] == "rehearsal"
    assert shown["hysteresis"] == 2 and shown["max_age_s"] == 604800.0
    assert datetime.fromisoformat(shown["measured_at"]) == measured
    levels = {name: seg["crossover"] for name, seg in shown["segments"].items()}
    assert levels == {"all": 2, "copy": 2, "creative": 0}
    assert shown["segments"]["all"]["text"] == "between 2 and 8"


def test_a_stale_crossover_reads_as_zero_everywhere(api, pg_committing):
    rollout_id = by_load_rollout(pg_committing, promote=True)
    record(api, rollout_id, datetime.now(UTC) - timedelta(days=8))
    shown = glance(api, rollout_id)["crossover"]
    assert shown["source"] == "stale"
    assert {seg["crossover"] for seg in shown["segments"].values()} == {0}


def test_a_running_rollout_shows_what_promotion_will_route_by(api, pg_committing):
    rollout_id = by_load_rollout(pg_committing, promote=False)
    record(api, rollout_id, datetime.now(UTC))
    shown = glance(api, rollout_id)["crossover"]
    assert not shown["routing_by_load"] and shown["source"] == "rehearsal"
    assert glance(api, api.rollout_id)["crossover"] is None  # promotion sends everything


def judge(pg_committing, rollout_id: int, at: datetime, bands: list[dict]) -> None:
    """Store a verdict made at `at` with these load bands, as the gate does."""
    with pg_committing() as db, db.begin():
        db.add(Verdict(rollout_id=rollout_id, stage=0, decision=Decision.CONTINUE,
                       created_at=at, bands=bands))  # fmt: skip


# Mirrored pairs won below 3 running requests on the candidate and lost near 9.
LIVE = [
    {"band": "<2", "ratio": 0.8, "lower": 0.75, "upper": 0.86, "n": 120,
     "candidate_load": 0.7, "baseline_load": 3.0, "proven": True},
    {"band": "2-4", "ratio": 0.9, "lower": 0.84, "upper": 0.97, "n": 90,
     "candidate_load": 2.6, "baseline_load": 3.1, "proven": False},
    {"band": "8-16", "ratio": 1.2, "lower": 1.1, "upper": 1.3, "n": 60,
     "candidate_load": 8.4, "baseline_load": 3.2, "proven": False},
]  # fmt: skip


def test_the_live_load_bands_route_when_more_recent_than_the_rehearsal(api, pg_committing):
    rollout_id = by_load_rollout(pg_committing, promote=True)
    now = datetime.now(UTC).replace(microsecond=0)
    judge(pg_committing, rollout_id, now - timedelta(hours=2), LIVE)
    record(api, rollout_id, now - timedelta(hours=1))
    assert glance(api, rollout_id)["crossover"]["source"] == "rehearsal"
    judge(pg_committing, rollout_id, now, LIVE)
    shown = glance(api, rollout_id)["crossover"]
    assert shown["source"] == "load_bands"
    assert datetime.fromisoformat(shown["measured_at"]) == now
    assert shown["segments"] == {"all": {"crossover": 3, "low": 3, "high": 9,
        "text": "between 3 and 9 running requests"}}  # fmt: skip


def test_bands_that_prove_nothing_leave_the_rehearsal_in_force(api, pg_committing):
    rollout_id = by_load_rollout(pg_committing, promote=True)
    now = datetime.now(UTC).replace(microsecond=0)
    record(api, rollout_id, now - timedelta(hours=1))
    unclear = [{**LIVE[1], "upper": 1.05}]
    judge(pg_committing, rollout_id, now, unclear)
    assert glance(api, rollout_id)["crossover"]["source"] == "rehearsal"
    judge(pg_committing, rollout_id, now + timedelta(seconds=1), [])  # no loads stamped
    assert glance(api, rollout_id)["crossover"]["source"] == "rehearsal"


def test_proven_bands_route_a_rollout_without_a_rehearsal(api, pg_committing):
    rollout_id = by_load_rollout(pg_committing, promote=True)
    judge(pg_committing, rollout_id, datetime.now(UTC), LIVE)
    shown = glance(api, rollout_id)["crossover"]
    assert shown["source"] == "load_bands" and shown["segments"]["all"]["crossover"] == 3


def armed_by_load(pg_committing, *, winner: str | None) -> int:
    """A rollout of arms k2, k4 and k8 routed by load; with `winner`, a verdict on its stage
    promotes that arm and the rollout is promoted (the others retired)."""
    with pg_committing() as db, db.begin():
        for name, role in [("plain-x", "baseline"), *[(f"ngram-{n}", "candidate") for n in ARMS]]:
            spec = RouteIn(name=name, base_url=f"http://{name}:8000/v1", model="m", role=role)
            service.create_route(db, spec=spec, actor="t")
        arms = [ArmIn(name=n, route=f"ngram-{n}") for n in ARMS]
        spec = RolloutIn(name="arms-by-load", alias="arms-by-load", baseline_route="plain-x",
                         arms=arms, policy=BY_LOAD)  # fmt: skip
        rollout = service.create_rollout(db, spec=spec, actor="t")
        service.transition(db, rollout_id=rollout.id, action=Action.START, actor="t", reason="t")
        if winner is not None:
            choice = {"winner": winner, "leader": winner, "arms": []}
            db.add(Verdict(rollout_id=rollout.id, stage=0, decision=Decision.PROMOTE,
                           bands=[], arms=choice))  # fmt: skip
            db.flush()
            service.transition(
                db, rollout_id=rollout.id, action=Action.PROMOTE, actor="t", reason="t"
            )
        return rollout.id


ARMS = ["k2", "k4", "k8"]


def test_a_promoted_arm_routes_by_its_own_rehearsed_crossover(api, pg_committing):
    # The rehearsal's lead (its top-level curve) is k4, crossing over between 2 and 8; the
    # rollout's gate promoted k2, which won up to 4: the gateway must route by k2's curve.
    rollout_id = armed_by_load(pg_committing, winner="k2")
    summary = {**arms_summary(at=2), "run_at": datetime.now(UTC).isoformat()}
    assert summary["lead"] == "k4"
    path = f"/v1/rollouts/{rollout_id}/rehearsals"
    assert api.client.post(path, json=summary, headers=api.headers("admin")).status_code == 201
    shown = glance(api, rollout_id)["crossover"]
    k2 = next(arm for arm in summary["arms"] if arm["name"] == "k2")["crossover"]
    assert shown["routing_by_load"] and shown["source"] == "rehearsal"
    assert {name: (seg["low"], seg["text"]) for name, seg in shown["segments"].items()} == {
        name: (cross["low"], cross["text"]) for name, cross in k2.items()
    }
    assert shown["segments"]["all"]["crossover"] == 4


def test_several_live_arms_route_by_no_arms_crossover_yet(api, pg_committing):
    # Before the choice, no arm's curve (nor the lead's) is the one promotion will route by.
    rollout_id = armed_by_load(pg_committing, winner=None)
    summary = {**arms_summary(at=2), "run_at": datetime.now(UTC).isoformat()}
    path = f"/v1/rollouts/{rollout_id}/rehearsals"
    assert api.client.post(path, json=summary, headers=api.headers("admin")).status_code == 201
    assert glance(api, rollout_id)["crossover"]["source"] == "missing"


def test_only_the_promoted_arms_load_bands_route(api, pg_committing):
    # The operator retired k4 and k8 and promoted k2 while the newest verdict still showed
    # k4 (the leader then) with its bands: those are k4's loads, not k2's.
    rollout_id = armed_by_load(pg_committing, winner=None)
    now = datetime.now(UTC).replace(microsecond=0)
    with pg_committing() as db, db.begin():
        for name in ("k4", "k8"):
            rollout_arms.kill_arm(db, rollout_id=rollout_id, name=name, actor="t", reason="t")
        db.add(Verdict(rollout_id=rollout_id, stage=0, decision=Decision.CONTINUE,
                       created_at=now - timedelta(minutes=5), bands=LIVE,
                       arms={"winner": None, "leader": "k4", "arms": []}))  # fmt: skip
        db.flush()
        service.transition(db, rollout_id=rollout_id, action=Action.PROMOTE, actor="t", reason="t")
    assert glance(api, rollout_id)["crossover"]["source"] == "missing"
    with pg_committing() as db, db.begin():
        db.add(Verdict(rollout_id=rollout_id, stage=0, decision=Decision.CONTINUE,
                       created_at=now, bands=LIVE,
                       arms={"winner": None, "leader": "k2", "arms": []}))  # fmt: skip
    shown = glance(api, rollout_id)["crossover"]
    assert shown["source"] == "load_bands" and shown["segments"]["all"]["crossover"] == 3


def test_the_promoted_arms_own_kill_verdict_routes_by_its_bands(api, pg_committing):
    # k2 is promoted; later its own gate kills it (auto_kill off: the rollout stays
    # promoted). A killed arm leads nothing, so the choice names no winner and no leader,
    # yet the verdict shows k2's bands (`rollout_verdict` falls back to the first arm with
    # a verdict): they are the promoted arm's own and newer than the rehearsal, and a
    # single candidate's kill verdict would route by them.
    rollout_id = armed_by_load(pg_committing, winner="k2")
    now = datetime.now(UTC).replace(microsecond=0)
    summary = {**arms_summary(at=2), "run_at": (now - timedelta(hours=1)).isoformat()}
    path = f"/v1/rollouts/{rollout_id}/rehearsals"
    assert api.client.post(path, json=summary, headers=api.headers("admin")).status_code == 201
    assert glance(api, rollout_id)["crossover"]["segments"]["all"]["crossover"] == 4
    killed = {"arm": "k2", "state": "killed", "decision": "kill", "pairs": 270,
              "reason_codes": ["kill_latency"], "summary": "kill: k2 is slower"}  # fmt: skip
    with pg_committing() as db, db.begin():
        later = now + timedelta(seconds=1)  # after the verdict that promoted k2
        db.add(Verdict(rollout_id=rollout_id, stage=0, decision=Decision.KILL, created_at=later,
                       bands=LIVE, arms={"winner": None, "leader": None, "arms": [killed],
                                         "waiting": []}))  # fmt: skip
    shown = glance(api, rollout_id)["crossover"]
    assert shown["source"] == "load_bands" and shown["segments"]["all"]["crossover"] == 3


def test_a_single_candidate_routes_by_its_own_arm_of_a_several_arm_rehearsal(api, pg_committing):
    # One candidate (k2's engine) promoted by load, rehearsed with `--candidate` x 3 next
    # to two other configurations: k4 leads the rehearsal (its curve is the top of the
    # document, crossing over at 2), but the rollout's candidate is k2, which won up to 4.
    with pg_committing() as db, db.begin():
        rollout = factories.running_rollout(
            db, name="one-of-three", policy=BY_LOAD, candidate_url="http://k2:8002/v1/"
        )
        service.transition(db, rollout_id=rollout.id, action=Action.PROMOTE, actor="t",
                           reason="t")  # fmt: skip
        rollout_id = rollout.id
    summary = {**arms_summary(at=2), "run_at": datetime.now(UTC).isoformat()}
    assert summary["lead"] == "k4"
    path = f"/v1/rollouts/{rollout_id}/rehearsals"
    assert api.client.post(path, json=summary, headers=api.headers("admin")).status_code == 201
    shown = glance(api, rollout_id)["crossover"]
    assert shown["source"] == "rehearsal" and shown["segments"]["all"]["crossover"] == 4
    # A several-arm rehearsal none of whose arms ran the candidate's URL is not its curve.
    with pg_committing() as db, db.begin():
        other = factories.running_rollout(
            db, name="none-of-three", policy=BY_LOAD, candidate_url="http://k16:8009/v1"
        )
        service.transition(db, rollout_id=other.id, action=Action.PROMOTE, actor="t",
                           reason="t")  # fmt: skip
        other_id = other.id
    path = f"/v1/rollouts/{other_id}/rehearsals"
    assert api.client.post(path, json=summary, headers=api.headers("admin")).status_code == 201
    assert glance(api, other_id)["crossover"]["source"] == "missing"
