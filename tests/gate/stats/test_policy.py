"""Policy: documented defaults, YAML loading, validation and the kill-budget split."""

from __future__ import annotations

import pytest

from gate.errors import BadRequest
from gate.stats.policy import Policy, at_stage, kill_alpha, load_policy
from gate.stats.policy_defaults import DEFAULT_POLICY_YAML
from gate.stats.registry import alpha_kill_each, kill_slots


def test_default_yaml_documents_exactly_the_model_defaults():
    assert load_policy(DEFAULT_POLICY_YAML) == Policy()


def test_defaults_match_the_issue():
    policy = load_policy(None)
    assert (policy.alpha_kill, policy.alpha_promote) == (0.025, 0.025)
    assert policy.stages == [1.0, 5.0, 25.0, 100.0]
    assert len(policy.segments) == 5


def test_partial_yaml_overrides_only_what_it_names():
    policy = load_policy(
        "primary: {metric: e2e, min_gain: 0.1}\n"
        "guardrails: {evaluators: {overrides: {schema: {margin: 0.05}}}}\n"
    )
    assert policy.primary.metric == "e2e"
    assert policy.primary.kill_slowdown == 0.10
    assert policy.guardrails.evaluators.overrides["schema"].margin == 0.05
    assert "task" not in policy.guardrails.evaluators.overrides
    assert policy.guardrails.evaluators.default.margin == 0.03


@pytest.mark.parametrize(
    "text",
    [
        "alpha_kill: 0.7",
        "primary: {metric: ttft}",
        "segments: [chat, chat]",
        "segments: [all]",
        "stages: [5, 1]",
        "no_such_field: 1",
    ],
)
def test_invalid_policies_are_bad_requests(text):
    with pytest.raises(BadRequest, match="invalid gate policy"):
        load_policy(text)


def test_kill_budget_is_split_over_guardrails_segments_and_detectors():
    policy = Policy()
    # 9 families (repetition loops among them, issue 40) + 4 evaluator slots + 3 parity
    # statistics, over 5 segments + pooled, + 7 collapse detectors (5 segments, pooled,
    # undeclared segments pooled), + 1 pooled per-token exactness test.
    assert kill_slots(policy) == 16 * 6 + 7 + 1
    assert alpha_kill_each(policy) == pytest.approx(0.025 / 104)
    # More evaluators than slots are counted, and disabling a family frees budget.
    assert kill_slots(policy, evaluators_seen=6) == 18 * 6 + 7 + 1
    lean = load_policy("guardrails: {feedback: {enabled: false}}")
    assert kill_slots(lean) == 15 * 6 + 7 + 1
    no_parity = load_policy("guardrails: {output_parity: {enabled: false}}")
    assert kill_slots(no_parity) == 13 * 6 + 7 + 1
    no_exactness = load_policy("guardrails: {exactness: {enabled: false}}")
    assert kill_slots(no_exactness) == 16 * 6 + 7
    no_loops = load_policy("guardrails: {loop: {enabled: false}}")
    assert kill_slots(no_loops) == 15 * 6 + 7 + 1


def test_the_cancel_rate_takes_a_kill_share_in_canary_mode_only():
    policy = Policy()
    # Shadow: nobody waits on the mirrored candidate, so there is no cancel-rate test.
    # Canary: no loop test (it reads the paired baseline answer), a cancel-rate test instead.
    assert kill_slots(policy) == 16 * 6 + 7 + 1
    assert kill_slots(policy, canary=True) == 16 * 6 + 7 + 1
    assert alpha_kill_each(policy, canary=True) == pytest.approx(0.025 / 104)
    assert policy.guardrails.cancels.margin == policy.guardrails.failures.margin
    off = load_policy("guardrails: {cancels: {enabled: false}}")
    assert kill_slots(off, canary=True) == 15 * 6 + 7 + 1


def test_the_stages_share_alpha_kill_equally_and_spend_it_in_full():
    policy = Policy()
    shares = [kill_alpha(policy, i) for i in range(len(policy.stages))]
    assert shares == [pytest.approx(0.025 / 4)] * 4
    assert sum(shares) == pytest.approx(policy.alpha_kill)
    assert kill_alpha(load_policy("stages: [100]"), 0) == policy.alpha_kill
    # A stage past the last (stages shortened mid-rollout) splits as if there were more.
    assert kill_alpha(policy, 5) == pytest.approx(0.025 / 6)
    with pytest.raises(ValueError, match="at least 0"):
        kill_alpha(policy, -1)
    staged = at_stage(policy, 2)
    assert alpha_kill_each(staged) == pytest.approx(alpha_kill_each(policy) / 4)
    assert staged.model_copy(update={"alpha_kill": policy.alpha_kill}) == policy


def test_the_pooled_detector_names_are_no_segment_names():
    for name in ("all", "undeclared"):
        with pytest.raises(BadRequest, match="must not include"):
            load_policy(f"segments: [chat, {name}]")
