"""The replay schema's `episode` field: a string names a pair's episode, null its own."""

from __future__ import annotations

import pytest

from gate.db.enums import RolloutMode
from gate.errors import InputMalformed
from gate.stats.policy import Policy
from gate.stats.record_columns import columns, episode_of


def test_a_pairs_episode_is_a_string_or_null():
    record = {"created_at": 0, "baseline": None, "candidate": None}
    assert episode_of(record) is None and episode_of({**record, "episode": None}) is None
    assert episode_of({**record, "episode": "conv-1"}) == "conv-1"
    columns([record, {**record, "episode": "conv-1"}], Policy(), RolloutMode.SHADOW)
    with pytest.raises(InputMalformed, match=r"pair 2: .*episode is not a string"):
        columns([record, {**record, "episode": 7}], Policy(), RolloutMode.SHADOW)


def test_a_pairs_episode_continues_from_an_earlier_stage_when_it_says_so():
    record = {"created_at": 0, "baseline": None, "candidate": None, "episode": "conv-1"}
    plain = columns([record, record], Policy(), RolloutMode.SHADOW)
    assert plain.continues is None
    went_on = columns([record, {**record, "episode_continues": True}], Policy(), RolloutMode.SHADOW)
    assert went_on.continues is not None and went_on.continues.tolist() == [False, True]
    with pytest.raises(InputMalformed, match=r"pair 2: .*episode_continues is not a boolean"):
        columns([record, {**record, "episode_continues": 1}], Policy(), RolloutMode.SHADOW)
