"""The registry builds what a rollout policy names, and refuses what it cannot build."""

from __future__ import annotations

import pytest

from evaluators.registry import build_evaluators, policy_entries
from gate.errors import ConfigError


def names(evaluator_set):
    return [e.name for e in evaluator_set.side], [e.name for e in evaluator_set.pair]


def test_no_evaluators_key_means_every_built_in_with_defaults():
    assert names(build_evaluators({})) == (
        ["groundedness", "schema", "task"],
        ["greedy_parity"],
    )


def test_a_policy_picks_evaluators_and_their_options():
    policy = {
        "evaluators": [
            {"name": "groundedness", "options": {"threshold": 0.9}},
            "greedy_parity",
        ]
    }
    built = build_evaluators(policy)
    assert names(built) == (["groundedness"], ["greedy_parity"])
    assert built.side[0].options.threshold == 0.9


def test_a_mapping_form_is_accepted():
    assert policy_entries({"evaluators": {"task": {"timeout_s": 2}}}) == [
        ("task", {"timeout_s": 2})
    ]
    assert (
        build_evaluators({"evaluators": {"task": {"timeout_s": 2}}}).side[0].limits.timeout_s == 2
    )


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"evaluators": ["toxicity"]}, "unknown evaluator 'toxicity'"),
        ({"evaluators": [{"name": "schema", "options": {"strictness": 3}}]}, "bad options"),
        ({"evaluators": "schema"}, "must be a list or a mapping"),
        ({"evaluators": [42]}, "bad evaluator entry"),
    ],
)
def test_bad_policies_are_config_errors(policy, message):
    with pytest.raises(ConfigError, match=message):
        build_evaluators(policy)
