"""The headline module: reason codes in words, statuses, pairs needed, and `rollout show`."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gate.cli import app
from gate.reports import headline as words
from gate.reports.glance import latest
from gate.rollouts import service
from gate.stats.policy import load_policy
from tests.gate.ui import glance_seed

M = words.MINUS
POLICY = load_policy({"segments": ["chat", "code"], "min_pairs": 200, "warmup_pairs": 50})


def cell(metric: str, segment: str = "all", **values: object) -> dict[str, object]:
    base = {"metric": metric, "segment": segment, "estimate": 1.0, "lower": 0.9, "upper": 1.1,
            "n": 100, "kill_at": 1.1, "margin": 1.1, "status": "unproven"}  # fmt: skip
    return {**base, **values}


def test_reason_codes_parse_with_colons_in_metric_names():
    got = words.parse_reason("kill:eval:groundedness:chat")
    assert (got.kind, got.what, got.metric, got.segment) == (
        "kill",
        "harm",
        "eval:groundedness",
        "chat",
    )
    got = words.parse_reason("continue:unproven:e2e_tail:all")
    assert (got.what, got.metric, got.segment) == ("unproven", "e2e_tail", "all")
    assert words.parse_reason("kill:acceptance_collapse:rag").what == "collapse"
    assert words.parse_reason("hold:dropped_share").what == "dropped_share"


def test_reasons_are_grouped_sentences_not_codes():
    codes = ["continue:min_pairs", "continue:gain_unproven"] + [
        f"continue:unproven:{m}:{s}"
        for m in ("failures", "e2e_tail")
        for s in ("all", "chat", "code")
    ]
    said = words.reason_sentences(codes, POLICY)
    assert said[0] == "Fewer tested pairs than the minimum for promotion (200)."
    assert said[1] == "The TPOT gain is not proven yet."
    assert said[2] == (
        "Waiting for more data in 6 cells (route failures: every segment; "
        "end-to-end tail: every segment)."
    )
    assert not any(":" in s.split("(")[0] for s in said[2:])


def test_pairs_needed_follow_the_interval_width():
    # TPOT proven faster; failures at +0.5 pts with the promotion bound at +3.5 pts against a
    # 1.5-point margin: the half-width (3 pts) must shrink to 1 pt, so 9x the pairs.
    verdict = {
        "decision": "continue", "n_pairs": 300, "reason_codes": ["continue:unproven:failures:all"],
        "estimates": [
            cell("tpot", estimate=0.6, lower=0.55, upper=0.65, kill_at=1.1, margin=1.1,
                 status="inside"),
            cell("failures", estimate=0.005, lower=-0.02, upper=0.035, kill_at=0.0, margin=0.015),
        ],
    }  # fmt: skip
    head = words.headline(verdict, policy=POLICY, pace=words.Pace(pairs=350, elapsed_s=3500))
    assert head.pairs_needed == 300 * 9 - 300
    assert head.seconds_needed == 2400 / 0.1
    assert head.sentence == (
        f"Continue: faster (TPOT {M}40 %, 95 % CI {M}45 % to {M}35 %), 1 guardrail(s) not yet "
        "within margin (route failures), 2,400 more pairs needed for promotion, about 6.7 h at "
        "this rate."
    )
    assert [line.status for line in head.lines] == ["better", "unproven"]


def test_a_guardrail_proven_outside_its_margin_puts_promotion_out_of_reach():
    verdict = {
        "decision": "continue", "n_pairs": 300, "reason_codes": [],
        "estimates": [cell("failures", estimate=0.03, lower=0.02, upper=0.04, kill_at=0.05,
                           margin=0.015)],
    }  # fmt: skip
    head = words.headline(verdict, policy=POLICY)
    assert head.pairs_needed is None
    assert "promotion out of reach: route failures is proven outside its margin" in head.sentence


def test_an_estimate_past_its_margin_past_min_pairs_does_not_claim_zero_pairs_needed():
    # 900 pairs (past min_pairs 200); the failures estimate sits past its 1.5-point margin
    # inside a wide interval: no extrapolation says how many pairs promotion needs, and it
    # needs more than none (the cell is unproven).
    verdict = {
        "decision": "continue", "n_pairs": 900, "reason_codes": ["continue:unproven:failures:all"],
        "estimates": [
            cell("tpot", estimate=0.6, lower=0.55, upper=0.65, status="inside"),
            cell("failures", estimate=0.02, lower=0.005, upper=0.035, kill_at=0.05,
                 margin=0.015),
        ],
    }  # fmt: skip
    head = words.headline(verdict, policy=POLICY, pace=words.Pace(pairs=900, elapsed_s=900))
    assert head.next_decision == "promotion"
    assert head.pairs_needed != 0
    assert "0 more pairs" not in head.sentence
    assert "more pairs needed for promotion" in head.sentence
    assert "route failures" in head.sentence.split("more pairs needed")[-1]


def test_a_kill_sentence_names_a_collapse_and_a_segment_harm_beside_a_pooled_one():
    # Killed for three causes: TPOT slower pooled, the task evaluator worse on `code` only,
    # and draft acceptance collapsed on `chat`. The sentence may shorten, never drop one.
    verdict = {
        "decision": "kill", "n_pairs": 400,
        "reason_codes": ["kill:tpot:all", "kill:eval:task:code", "kill:acceptance_collapse:chat"],
        "estimates": [
            cell("tpot", estimate=1.3, lower=1.2, upper=1.4, status="harmful"),
            cell("eval:task", estimate=-0.01, lower=-0.03, upper=0.01, kill_at=0.05,
                 margin=0.02),
            cell("eval:task", "code", estimate=0.12, lower=0.06, upper=0.18, kill_at=0.05,
                 margin=0.02, status="harmful"),
            cell("acceptance", estimate=0.5, lower=0.4, upper=0.6, kill_at=0.2, margin=0.2,
                 status="inside"),
        ],
    }  # fmt: skip
    head = words.headline(verdict, policy=POLICY)
    assert head.sentence.startswith("Kill: ")
    assert "quality dropped: task" in head.sentence and "code" in head.sentence
    assert "draft acceptance collapsed" in head.sentence
    assert "TPOT" in head.sentence or "more" in head.sentence


def test_a_kill_for_a_down_candidate_says_so_first():
    verdict = {"decision": "kill", "n_pairs": 40, "reason_codes": ["kill:candidate_down"],
               "estimates": [cell("failures", estimate=0.9, lower=0.8, upper=1.0,
                                  kill_at=0.0, margin=0.015, status="harmful")]}  # fmt: skip
    head = words.headline(verdict, policy=POLICY)
    assert head.sentence.startswith(
        "Kill: the candidate route did not answer (down, its calls skipped) for longer than"
        " the policy allows (5 min); the candidate fails more often"
    ), head.sentence


def test_rollout_show_prints_the_headline_and_json(pg_committing, pg_url):
    with pg_committing() as db, db.begin():
        ids = glance_seed.judged(db)
    runner = CliRunner()
    env = {"COLUMNS": "100", "NO_COLOR": "1"}
    for name, rollout_id in ids.items():
        with pg_committing() as db:
            want = latest(db, rollout=service.get_rollout(db, rollout_id=rollout_id)).headline
        shown = runner.invoke(
            app, ["rollout", "show", str(rollout_id), "--database-url", pg_url], env=env
        )
        assert shown.exit_code == 0, shown.output
        assert "\n".join(words.text_lines(want, width=100)) in shown.output
        assert max(len(line) for line in shown.output.splitlines()) <= 100
        got = runner.invoke(
            app, ["rollout", "show", str(rollout_id), "--json", "--database-url", pg_url], env=env
        )
        document = json.loads(got.output)
        assert document["name"] == name
        assert document["glance"]["headline"]["sentence"] == want.sentence
        assert document["glance"]["headline"]["reason_codes"] == want.reason_codes


def test_the_glance_of_a_rollout_past_a_stage_reads_that_stage_not_the_last_ones_verdict(
    pg_session,
):
    # Stage 0 was judged "promote"; the rollout now serves stage 1, not judged yet. The
    # glance names stage 1, so its headline must not repeat stage 0's decision as stage 1's.
    from gate.db.enums import Decision
    from gate.db.models import Verdict
    from gate.reports.glance import latest
    from tests import factories

    rollout = factories.rollout(pg_session, name="staged", policy={"stages": [10.0, 100.0]})
    pg_session.add(
        Verdict(rollout_id=rollout.id, stage=0, decision=Decision.PROMOTE,
                reason_codes=["promote:gain_proven"], summary="promote", estimates=[],
                n_pairs=900)
    )  # fmt: skip
    rollout.stage = 1
    pg_session.flush()
    got = latest(pg_session, rollout=rollout)
    assert got.stage == 1
    assert got.verdict_id is None
    assert got.headline.decision == "continue"
    assert got.headline.reason_codes == ["no_pairs"]
    from gate.reports.dashboard import overview

    row = next(r for r in overview(pg_session) if r.id == rollout.id)
    assert row.headline == got.headline.sentence


def test_reasons_read_without_a_policy_say_the_primary_gain_once():
    sentences = words.reason_sentences(("promote:gain_proven",), None)
    assert sentences == ["The primary latency gain is proven."]


ARMED = {
    "decision": "continue", "n_pairs": 900, "reason_codes": ["continue:min_pairs"],
    "estimates": [cell("tpot", estimate=0.7, lower=0.65, upper=0.75, status="better")],
    "arms": {
        "winner": None, "leader": "k4",
        "arms": [
            {"arm": "k4", "state": "running", "decision": "continue", "pairs": 400,
             "ratio": 0.7, "interval": [0.62, 0.79], "reason_codes": ["continue:min_pairs"]},
            {"arm": "k8", "state": "killed", "decision": "kill", "pairs": 300,
             "ratio": 0.8, "interval": [0.7, 0.9], "reason_codes": ["kill:eval:task:all"]},
            {"arm": "k2", "state": "waiting", "decision": "continue", "pairs": 0,
             "ratio": None, "interval": [None, None], "reason_codes": []},
        ],
    },
}  # fmt: skip


def test_a_verdict_with_arms_names_its_leader_and_the_arms_killed_on_their_own():
    head = words.headline(ARMED, policy=POLICY)
    assert head.sentence.startswith("Continue: arm 'k4' leads; faster (TPOT ")
    assert head.sentence.endswith("; killed on its own: arm 'k8' (harm proven in task).")
    assert (head.leader, head.winner) == ("k4", None)
    k4, k8, k2 = head.arms
    assert (k4.role, k4.estimate, k4.interval) == ("leader", f"{M}30 %", f"{M}38 % to {M}21 %")
    interval = f"choice interval {M}38 % to {M}21 %"
    assert k4.text == f"arm k4 (running, leader): TPOT {M}30 % ({interval}), 400 pairs"
    assert (k8.state_words, k8.causes) == ("killed", ["harm proven in task"])
    assert k2.text == "arm k2 (no pairs yet): no data yet, 0 pairs"
    assert any(line.strip().startswith("✗ arm k8 (killed)") for line in words.text_lines(head))
    assert f"- {k4.text}" in words.markdown(head)


def test_an_arm_line_says_its_share_once_the_shares_are_unequal():
    head = words.headline(ARMED, policy=POLICY, shares={"k4": 0.8, "k2": 0.2})
    k4, k8, k2 = head.arms
    assert (k4.share, k8.share, k2.share) == (0.8, None, 0.2)
    assert k4.text.endswith("400 pairs, 80 % of the episodes")
    assert k2.text.endswith("0 pairs, 20 % of the episodes")
    equal = words.headline(ARMED, policy=POLICY, shares={"k4": 0.5, "k2": 0.5})
    assert equal.arms[0].share == 0.5 and equal.arms[0].text.endswith("400 pairs")


def test_a_single_candidate_headline_has_no_arms():
    single = {key: value for key, value in ARMED.items() if key != "arms"}
    head = words.headline(single, policy=POLICY)
    assert head.arms == [] and head.winner is None
    assert head.sentence.startswith("Continue: faster (TPOT ")
    assert "arm" not in " ".join(words.text_lines(head))
