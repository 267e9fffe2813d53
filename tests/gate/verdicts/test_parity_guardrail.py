"""Sampled-output parity through the registry: replay, the kill budget, the verdict."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from collectors.retention import _scrub_generations
from gate.cli.gatecmd import with_parity
from gate.db.enums import RolloutMode
from gate.db.models import GateFold
from gate.db.models.quality import NO_ARM
from gate.pairs.export import pair_records
from gate.parity import answer_stats
from gate.reports.guardrails import declared as declared_guardrails
from gate.reports.headline import headline, reason_sentences
from gate.reports.model import Week
from gate.reports.weekly import compute_weekly
from gate.stats.policy import Policy
from gate.stats.registry import find, kill_slots
from gate.stats.replay import replay
from gate.stats.rule import Code
from gate.stats.simulate import run_scenario
from gate.stats.simulated_pairs import Scenario
from gate.verdicts.service import compute, run_gate
from tests import factories
from tests.gate.stats.test_sql import store

POLICY = Policy.model_validate(
    {"segments": ["chat"], "warmup_pairs": 100, "min_pairs": 300, "min_duration_s": 0,
     "guardrails": {"output_parity": {"enabled": True}}}
)  # fmt: skip
START = datetime(2025, 5, 1, tzinfo=UTC)


def side(rng: np.random.Generator, shift: float, *, logprobs: bool = True, **extra: object):
    tokens = int(rng.integers(20, 60))
    mean = -1.0 + shift + rng.normal(0.0, 0.2)
    return {
        "ttft_s": 0.2, "tpot_s": 0.02, "e2e_s": 1.0, "status": "ok", "evals": {"task": True},
        "draft_tokens": 10, "accepted_tokens": 6,
        "temperature": 0.8, "top_p": 1.0, "max_tokens": 128, "seed": None,
        "finish_reason": "stop", "output_tokens": tokens,
        "logprob_tokens": tokens if logprobs else None,
        "logprob_sum": mean * tokens if logprobs else None,
        "distinct_2": float(rng.uniform(0.7, 1.0)),
    } | extra  # fmt: skip


def records(n: int, *, shift: float = 0.0, control_shift: float = 0.0, seed: int = 1, **extra):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        control = i % 5 == 0
        moved = control_shift if control else shift
        out.append({
            "pair_id": f"{i:08d}", "segment": "chat", "is_control": control,
            "created_at": (START + timedelta(seconds=i)).isoformat(),
            "baseline": side(rng, 0.0, **extra), "candidate": side(rng, moved, **extra),
        })  # fmt: skip
    return out


def test_parity_is_declared_once_and_takes_its_kill_shares():
    g = find("parity")
    assert g is not None and g.control_alarm
    off = POLICY.model_copy(
        update={"guardrails": POLICY.guardrails.model_copy(
            update={"output_parity": POLICY.guardrails.output_parity.model_copy(
                update={"enabled": False})})}
    )  # fmt: skip
    # Three statistics, pooled and in the one declared segment.
    assert kill_slots(POLICY) == kill_slots(off) + 3 * 2


def test_an_exact_sampler_is_not_killed_and_the_cells_exist():
    got = replay(records(1500), POLICY, every=50)
    assert not any(c.startswith("kill:parity") for c in got.verdict.reason_codes)
    cells = {(c.metric, c.segment) for c in got.verdict.cells}
    assert ("parity:mean_logprob", "all") in cells and ("parity:length", "chat") in cells


def test_a_mode_seeking_sampler_is_killed_with_the_sentence():
    got = replay(records(1500, shift=0.15), POLICY, every=50)
    assert got.decision.value == "kill", got.verdict.summary
    assert "kill:parity:mean_logprob:all" in got.verdict.reason_codes
    assert "more likely under the model" in got.verdict.summary
    assert any("sampled-output parity" in s for s in reason_sentences(got.verdict.reason_codes))
    glance = headline(got.verdict, policy=POLICY)
    assert "sampled outputs shifted" in glance.sentence
    said = glance.reasons
    assert any(s.startswith("Candidate answers are more likely under the model") for s in said)


def test_without_logprobs_the_text_statistics_are_tested():
    got = replay(records(800, logprobs=False), POLICY, every=800)
    by = {(c.metric, c.segment): c.n for c in got.verdict.cells}
    assert by[("parity:mean_logprob", "all")] == 0 and by[("parity:length", "all")] > 500


def test_a_shifted_control_slice_is_an_alarm_not_a_kill():
    got = replay(records(2000, control_shift=0.2), POLICY, every=2000)
    assert "alarm:control_parity:mean_logprob" in got.verdict.reason_codes
    assert got.decision.value != "kill" or not any(
        c.startswith("kill:parity") for c in got.verdict.reason_codes
    )
    assert "Data-quality alarm" in got.verdict.summary


def test_shadow_pairs_with_different_deadlines_that_ended_naturally_are_eligible():
    # The mirror's deadline is not in the record; a side it cut has no finish reason.
    cut = records(600)
    for r in cut[::2]:
        r["candidate"]["finish_reason"] = None
    whole = replay(records(600), POLICY, every=600).verdict.cells
    half = replay(cut, POLICY, every=600).verdict.cells
    n = {c.metric: c.n for c in whole if c.segment == "all"}
    m = {c.metric: c.n for c in half if c.segment == "all"}
    assert 0 < m["parity:mean_logprob"] < n["parity:mean_logprob"]


def test_canary_uses_the_unpaired_form_and_kills_a_biased_cohort():
    rows = records(3000, shift=0.15)
    for i, r in enumerate(rows):
        r["is_control"] = False
        r["baseline" if i % 2 else "candidate"] = None
    got = replay(rows, POLICY, every=100, mode=RolloutMode.CANARY)
    assert "kill:parity:mean_logprob:all" in got.verdict.reason_codes, got.verdict.summary
    null = records(3000, seed=4)
    for i, r in enumerate(null):
        r["is_control"] = False
        r["baseline" if i % 2 else "candidate"] = None
    quiet = replay(null, POLICY, every=100, mode=RolloutMode.CANARY)
    assert not any(c.startswith("kill:parity") for c in quiet.verdict.reason_codes)


def test_the_default_policy_tests_parity_in_both_modes():
    # On by default: shadow pairs and canary cohorts alike get the cells and the kill.
    default = Policy()
    assert find("parity").thresholds(default, "all") is not None
    rows = records(3000, shift=0.15)
    for i, r in enumerate(rows):
        r["is_control"] = False
        r["baseline" if i % 2 else "candidate"] = None
    canary = replay(rows, default, every=100, mode=RolloutMode.CANARY)
    assert "kill:parity:mean_logprob:all" in canary.verdict.reason_codes, canary.verdict.summary
    shadow = replay(records(3000), default, every=3000).verdict
    n = {c.metric: c.n for c in shadow.cells if c.segment == "chat"}
    assert n["parity:mean_logprob"] > 2000
    assert not any(c.startswith("kill:parity") for c in shadow.reason_codes)


def test_simulation_with_the_real_verifiers_kills_the_biased_one_only():
    # Small pools of answers drawn by the engine's decode loop with the exact and the
    # biased-argmax verifier (gate.engines.answer_pools); the whole default policy with
    # parity switched on.
    policy = with_parity(Policy())
    pool = (3, 40, 11)
    biased = run_scenario(
        Scenario("biased", 3000, sampler="biased", pool=pool), policy, runs=20, seed=1
    )
    exact = run_scenario(
        Scenario("exact", 3000, sampler="exact", pool=pool), policy, runs=20, seed=2
    )
    assert biased.count(Code.KILL) >= 18, biased.kill_reasons
    assert any(r.startswith("parity:mean_logprob") for r in biased.kill_reasons)
    assert not any(r.startswith("parity:") for r in exact.kill_reasons), exact.kill_reasons


@pytest.mark.postgres
def test_stored_pairs_reach_the_verdict_the_export_and_the_weekly_report(pg_session):
    rows = records(1200, shift=0.15)
    for i, r in enumerate(rows):
        r["evaluated_at"] = (START + timedelta(seconds=i, milliseconds=500)).isoformat()
    rollout = factories.rollout(pg_session, policy=POLICY.model_dump(mode="json"))
    store(pg_session, rows, rollout.id)
    exported = list(pair_records(pg_session, rollout_id=rollout.id))
    assert exported[0]["candidate"]["finish_reason"] == "stop"
    assert exported[0]["candidate"]["logprob_tokens"] == rows[0]["candidate"]["output_tokens"]
    verdict = run_gate(pg_session, rollout_id=rollout.id, publisher=None)
    assert "kill:parity:mean_logprob:all" in verdict.reason_codes, verdict.summary
    # Judged by the fold (its state stored), not by a replay of the stage's records.
    state = pg_session.get(GateFold, (rollout.id, 0, NO_ARM))
    assert state is not None and state.pairs == len(rows)
    year, number, _ = datetime.now(UTC).isocalendar()
    report = compute_weekly(pg_session, Week(year, number))
    week = next(w for w in report.rollouts if w.rollout_id == rollout.id)
    assert [row for row in week.guardrails if row[0] == "parity:mean_logprob"]
    assert "parity" in {g.id for g in declared_guardrails()}


def speculating_llama_cpp(rows: list[dict]) -> list[dict]:
    """Give the candidate llama.cpp's log-probabilities under n-gram speculation: one per
    verify step, so an answer whose drafts were accepted (the longer ones) has fewer."""
    for r in rows:
        c = r["candidate"]
        if c["output_tokens"] >= 40:
            mean = c["logprob_sum"] / c["logprob_tokens"]
            c["logprob_tokens"] = c["output_tokens"] - 8
            c["logprob_sum"] = mean * c["logprob_tokens"]
    return rows


@pytest.mark.postgres
def test_the_text_statistics_of_a_lossless_candidate_do_not_hang_on_its_logprobs(pg_session):
    # Whether the candidate's log-probabilities cover every token depends on its answer:
    # comparing text statistics only where they do not would compare its long answers
    # with all of the baseline's (a lossless candidate killed as "longer").
    rows = speculating_llama_cpp(records(1500, seed=7))
    for i, r in enumerate(rows):
        r["evaluated_at"] = (START + timedelta(seconds=i, milliseconds=500)).isoformat()
    got = replay(rows, POLICY, every=50).verdict
    assert not any(c.startswith("kill:parity") for c in got.reason_codes), got.summary
    n = {c.metric: c.n for c in got.cells if c.segment == "all"}
    assert n["parity:length"] == n["parity:distinct_2"] > 1000
    rollout = factories.rollout(pg_session, policy=POLICY.model_dump(mode="json"))
    store(pg_session, rows, rollout.id)
    folded = run_gate(pg_session, rollout_id=rollout.id, publisher=None)
    assert not any(c.startswith("kill:parity") for c in folded.reason_codes), folded.summary


def with_answers(rows: list[dict], seed: int = 3) -> list[dict]:
    """Give each sampled side an answer text, its distinct-2 computed as the collector does."""
    rng = np.random.default_rng(seed)
    for r in rows:
        for side_ in (r["baseline"], r["candidate"]):
            words = [str(w) for w in rng.integers(0, 6, side_["output_tokens"])]
            side_["output"] = " ".join(words)
            side_["distinct_2"] = answer_stats(words).distinct_2
    return rows


@pytest.mark.postgres
def test_retention_leaves_the_exported_answers_statistics_as_the_fold_saw_them(pg_session):
    # Retention scrubs answer texts after days; the fold stored each pair's d long before,
    # and a replay of the export must still see the distinct-2 the fold summed.
    rows = with_answers(records(600))
    for i, r in enumerate(rows):
        r["evaluated_at"] = (START + timedelta(seconds=i, milliseconds=500)).isoformat()
    rollout = factories.rollout(pg_session, policy=POLICY.model_dump(mode="json"))
    store(pg_session, rows, rollout.id)
    folded = compute(pg_session, rollout=rollout, policy=POLICY)
    later = datetime.now(UTC) + timedelta(days=30)
    scrub, _ = _scrub_generations(later, 10_000, later)
    assert pg_session.execute(scrub).rowcount == 2 * len(rows)
    exported = list(pair_records(pg_session, rollout_id=rollout.id))
    assert exported[0]["candidate"]["distinct_2"] == rows[0]["candidate"]["distinct_2"]
    replayed = replay(exported, POLICY, every=len(exported)).verdict
    n = {(c.metric, c.segment): c.n for c in replayed.cells if c.metric.startswith("parity")}
    assert n == {(c.metric, c.segment): c.n for c in folded.cells if c.metric in {m for m, _ in n}}
    assert n[("parity:distinct_2", "all")] == 400  # 600 pairs, 100 in warm-up, 100 control


@pytest.mark.postgres
def test_mean_logprob_is_not_tested_where_a_route_reports_them_per_verify_step(pg_session):
    # llama.cpp's one log-prob per verify step: complete only where no draft was accepted,
    # i.e. on the candidate's less predictable answers. Compared on those alone, a lossless
    # candidate looked "less likely under the model" (killed 5 in 5). A warm-up that saw
    # such answers leaves the statistic untested for the stage.
    rows = records(1500, seed=11)
    for i, r in enumerate(rows):
        r["evaluated_at"] = (START + timedelta(seconds=i, milliseconds=500)).isoformat()
        c = r["candidate"]
        mean = c["logprob_sum"] / c["logprob_tokens"]
        if mean > -0.9:
            c["logprob_tokens"] = c["output_tokens"] - 8
            c["logprob_sum"] = mean * c["logprob_tokens"]
    got = replay(rows, POLICY, every=50).verdict
    assert not any(c.startswith("kill:parity") for c in got.reason_codes), got.summary
    n = {c.metric: c.n for c in got.cells if c.segment == "all"}
    assert n["parity:mean_logprob"] == 0 and n["parity:length"] > 1000
    rollout = factories.rollout(pg_session, policy=POLICY.model_dump(mode="json"))
    store(pg_session, rows, rollout.id)
    folded = compute(pg_session, rollout=rollout, policy=POLICY)
    assert not any(c.startswith("kill:parity") for c in folded.reason_codes), folded.summary
    assert {c.metric: c.n for c in folded.cells if c.segment == "all"}["parity:mean_logprob"] == 0
