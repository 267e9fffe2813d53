"""Recording a rehearsal for a rollout through the control API, as a deploy pipeline does."""

from __future__ import annotations

import copy

import pytest

from gate.db.models import AuditEvent, Rehearsal
from tests import factories
from tests.gate.rehearse.summaries import arms_summary

pytestmark = pytest.mark.postgres


def record(api, body, who="admin", rollout_id=None):
    path = f"/v1/rollouts/{rollout_id or api.rollout_id}/rehearsals"
    return api.client.post(path, json=body, headers=api.headers(who))


def test_a_recorded_rehearsal_is_committed_before_the_answer_and_reads_back(api, pg_committing):
    answer = record(api, factories.rehearsal_summary())
    assert answer.status_code == 201, answer.text
    shown = answer.json()
    assert shown["sentence"].startswith("Rehearsed 2026-11-20 09:30 UTC: baseline http://plain")
    assert "Crossover, all segments: between 2 and 8." in shown["lines"]
    assert shown["lines"][-1] == (
        "At production concurrency 32: the sweep could not tell (32 is above the sweep's 8)."
    )
    with pg_committing() as db:  # another session: the row was committed
        row = db.get(Rehearsal, api.rollout_id)
        actions = [e.action for e in db.query(AuditEvent).filter_by(rollout_id=api.rollout_id)]
    assert row is not None and (row.workload, row.requests, row.at) == ("built-in workload", 40, 32)
    assert row.recorded_by == "key:admin" and "rehearsal.record" in actions
    got = api.client.get(f"/v1/rollouts/{api.rollout_id}/rehearsal", headers=api.headers("read"))
    assert got.status_code == 200 and got.json()["rows"] == shown["rows"]


def test_a_newer_rehearsal_replaces_the_older(api):
    record(api, factories.rehearsal_summary())
    newer = {**factories.rehearsal_summary(at=2, decision="pays"), "run_at": "2026-11-21T08:00Z"}
    assert record(api, newer).status_code == 201
    got = api.client.get(f"/v1/rollouts/{api.rollout_id}/rehearsal", headers=api.headers("read"))
    assert got.json()["sentence"].startswith("Rehearsed 2026-11-21 08:00 UTC")
    assert got.json()["lines"][-1] == "At production concurrency 2: speculation pays."


@pytest.mark.parametrize(("who", "status"), [("none", 401), ("revoked", 401), ("read", 403),
                                             ("operate", 403)])  # fmt: skip
def test_only_an_admin_key_records(api, who, status):
    assert record(api, factories.rehearsal_summary(), who=who).status_code == status
    got = api.client.get(f"/v1/rollouts/{api.rollout_id}/rehearsal", headers=api.headers("read"))
    assert got.status_code == 404 and "has no recorded rehearsal" in got.json()["detail"]


def _broken(change):
    body = copy.deepcopy(factories.rehearsal_summary())
    change(body)
    return body


BAD = {
    "no levels": (lambda b: b.update(levels=[]), "levels"),
    "levels out of order": (
        lambda b: b["levels"].reverse(),
        "levels must rise without repeats, got concurrency",
    ),
    "interval misses the estimate": (
        lambda b: b["levels"][0]["segments"]["all"].update(interval=[1.5, 1.6]),
        "interval [1.5, 1.6] does not hold 1.42",
    ),
    "segment without a crossover": (
        lambda b: b["crossover"].pop("copy"),
        "level 1 has segments ['all', 'copy', 'creative']",
    ),
    "unknown call": (lambda b: b["levels"][0]["segments"]["all"].update(call="maybe"), "call"),
    "no routes": (lambda b: b.pop("routes"), "routes"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_malformed_summary_is_a_422_that_says_what_is_wrong(api, case):
    change, words = BAD[case]
    answer = record(api, _broken(change))
    assert answer.status_code == 422 and words in answer.text, answer.text
    got = api.client.get(f"/v1/rollouts/{api.rollout_id}/rehearsal", headers=api.headers("read"))
    assert got.status_code == 404


def test_an_unknown_rollout_is_a_404(api):
    answer = record(api, factories.rehearsal_summary(), rollout_id=987654)
    assert answer.status_code == 404 and "rollout 987654 not found" in answer.text


def test_a_retried_post_replays_its_answer_and_a_reused_key_is_a_409(api, pg_committing):
    headers = {**api.headers("admin"), "Idempotency-Key": "ci-run-7"}
    path = f"/v1/rollouts/{api.rollout_id}/rehearsals"
    first = api.client.post(path, json=factories.rehearsal_summary(), headers=headers)
    again = api.client.post(path, json=factories.rehearsal_summary(), headers=headers)
    assert first.status_code == 201 and again.json() == first.json()
    with pg_committing() as db:
        recorded = db.query(AuditEvent).filter_by(action="rehearsal.record").count()
    assert recorded == 1, "the retry recorded nothing twice"
    other = api.client.post(path, json=factories.rehearsal_summary(at=4), headers=headers)
    assert other.status_code == 409 and "already used for a different request" in other.text


def test_a_several_arm_rehearsal_shows_every_arm_at_its_own_confidence(api):
    # Three arms at 0.05 / 3 each (`specgate rehearse --candidate` x 3, --at 2): k4 leads
    # at 2 and pays, k2 pays too, k8 is the fastest but not exact, so never chosen.
    summary = arms_summary(at=2)
    assert record(api, summary).status_code == 201
    path = f"/v1/rollouts/{api.rollout_id}/glance"
    shown = api.client.get(path, headers=api.headers("read")).json()["rehearsal"]
    assert shown["lead"] == "k4"
    assert "against 3 arms (k2, k4, k8, lead k4)" in shown["sentence"]
    assert shown["headers"][2] == "speedup [98.3 % interval]"  # the lead arm's curve's
    arms = {arm["name"]: arm for arm in shown["arms"]}
    assert list(arms) == ["k2", "k4", "k8"]
    assert [(a["lead"], a["pays"], a["usable"]) for a in arms.values()] == [
        (False, True, True), (True, True, True), (False, False, False)
    ]  # fmt: skip
    assert {a["confidence"] for a in arms.values()} == {"98.3 %"}
    assert shown["arms_note"] == (
        "3 arms against the same baseline, each arm's intervals at 98.3 % "
        "(alpha 0.0167 = 0.05 / 3, Bonferroni)."
    )
    assert arms["k4"]["crossover"] == "between 2 and 8"
    assert arms["k8"]["exactness"] == "not exact: TV 0.21 [0.12, 0.30]"
    parity = "greedy parity: 1 of 4 answers identical token for token (mismatch rate 0.75)"
    assert arms["k8"]["exactness_detail"].endswith(f"{parity}; never chosen")
    assert arms["k2"]["exactness"] == "exact"
    assert arms["k2"]["exactness_detail"].startswith("exact: no deviation beyond TV 0.05")
    # Each arm's all-segments curve at its own alpha, as recorded.
    recorded = {a["name"]: a for a in summary["arms"]}
    for name, arm in arms.items():
        cells = [level["segments"]["all"] for level in recorded[name]["levels"]]
        assert [(p["speedup"], [p["low"], p["high"]]) for p in arm["points"]] == [
            (c["speedup"], c["interval"]) for c in cells
        ]
    assert shown["best"][0].startswith("Best arm, all segments: at 1 k4 (1.42x, ahead of k2)")
    assert "Arms that pay at 2: k2, k4; not exact, never chosen: k8." in shown["lines"]


def test_arms_recorded_before_their_correction_are_not_said_to_be_corrected(api):
    # A rehearsal recorded before arms carried their alpha: every arm was judged at 0.05.
    summary = arms_summary(at=2)
    summary["interval_alpha"] = 0.05
    for arm in summary["arms"]:
        del arm["interval_alpha"]
    assert record(api, summary).status_code == 201
    path = f"/v1/rollouts/{api.rollout_id}/glance"
    shown = api.client.get(path, headers=api.headers("read")).json()["rehearsal"]
    assert {arm["confidence"] for arm in shown["arms"]} == {"95 %"}
    assert shown["arms_note"] == (
        "3 arms against the same baseline, each arm's intervals at 95 % (alpha 0.05, "
        "not corrected for 3 arms: one may read as paying by chance)."
    )
