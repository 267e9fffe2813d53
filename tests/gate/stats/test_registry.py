"""The guardrail registry: one declaration adds a guardrail to every path that iterates it."""

from __future__ import annotations

import numpy as np

from gate.db.enums import RolloutMode
from gate.stats.ids import ALL, Cell, MetricId, Reason, ReasonKind
from gate.stats.policy import Policy
from gate.stats.policy_sections import RateGuardrail
from gate.stats.registry import (
    Family,
    Guardrail,
    Source,
    Unit,
    declared,
    guardrails,
    kill_slots,
    rate_rule,
    rule_for,
)
from gate.stats.replay import replay
from gate.stats.simulate import run_scenario
from gate.stats.simulated_pairs import Scenario, draw_pairs, to_records

POLICY = Policy(warmup_pairs=100, min_pairs=300, min_duration_s=0)
TOY = Guardrail(
    "tpot_tail",
    "TPOT exceedances of the baseline's warm-up p95 (a toy)",
    Source.TPOT,
    Unit.PAIR,
    Family.EXCEEDANCE,
    Family.UNPAIRED_RATES,
    lambda policy, segment: rate_rule(RateGuardrail(margin=0.05, kill_at=0.01), policy, segment),
    quantile=lambda policy: 0.95,
)


def test_a_toy_guardrail_is_one_declaration_seen_by_replay_the_rule_and_the_verdict():
    before = kill_slots(POLICY)
    records = to_records(
        draw_pairs(Scenario("A/A", 800), POLICY, 1, np.random.default_rng(3)), POLICY
    )
    plain = replay(records, POLICY, every=len(records)).verdict
    assert not any(c.metric == "tpot_tail" for c in plain.cells)
    with declared(TOY):
        assert TOY in guardrails()
        assert kill_slots(POLICY) == before + len(POLICY.segments) + 1
        assert rule_for(POLICY, "tpot_tail", "chat") is not None
        for mode in RolloutMode:
            verdict = replay(records, POLICY, every=len(records), mode=mode).verdict
            toy = [c for c in verdict.cells if c.metric == "tpot_tail"]
            assert {c.segment for c in toy} == {ALL, *POLICY.segments}
            assert all(c.n > 0 for c in toy if c.segment == ALL)
    assert TOY not in guardrails()


def test_a_toy_guardrail_kills_in_simulation():
    # The candidate's TPOT is 30% slower on every call: the toy's p95 exceedance rises well
    # past its kill line. The primary guardrail is told to kill only at +100%.
    slower = Scenario("tpot +30%", pairs=3000, every=50, tpot_ratio=1.3)
    lax = POLICY.model_copy(
        update={"primary": POLICY.primary.model_copy(update={"kill_slowdown": 1.0})}
    )
    with declared(TOY):
        out = run_scenario(slower, lax, runs=20, seed=5)
    assert any(reason.startswith("tpot_tail:") for reason in out.kill_reasons), out.kill_reasons


def test_typed_reasons_render_the_stable_codes():
    cell = Cell(MetricId("eval", "task"), ALL)
    assert cell == ("eval:task", "all") and cell.metric.evaluator == "task"
    assert Reason(ReasonKind.KILL, Cell(MetricId("ttft_p50"), "chat")).code == "kill:ttft_p50:chat"
    assert Reason(ReasonKind.COLLAPSE, segment="undeclared").code == (
        "kill:acceptance_collapse:undeclared"
    )
    assert Reason(ReasonKind.UNPROVEN, cell).code == "continue:unproven:eval:task:all"
    assert Reason(ReasonKind.DROPPED_SHARE).code == "hold:dropped_share"


def test_the_declaration_type_can_express_the_guardrails_to_come():
    # Sampled-output parity: a paired mean of a per-pair statistic d with a control-slice
    # alarm, and an unpaired canary form; load bands: promotion only, no kill share.
    parity = Guardrail("output_parity", "sampled-output parity", Source.PARITY, Unit.PAIR,
                       Family.PAIRED_MEAN, Family.UNPAIRED_RATES,
                       lambda p, s: None, control_alarm=True)  # fmt: skip
    band = Guardrail("load_band", "candidate load within its band", Source.LOAD, Unit.REQUEST,
                     Family.BAND, Family.BAND, lambda p, s: rate_rule(RateGuardrail(), p, s),
                     kills=False)  # fmt: skip
    assert parity.control_alarm and parity.family(RolloutMode.CANARY) is Family.UNPAIRED_RATES
    assert band.kill_shares(POLICY, 0, canary=False) == 0
