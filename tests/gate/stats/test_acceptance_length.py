"""Acceptance length (tokens per verify step) and the repetition-loop signature."""

from __future__ import annotations

import numpy as np
import pytest

from gate.stats.acceptance_length import looping, passes, summarise
from gate.stats.arms_replay import acceptance_of


def arr(*values: float) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


def test_length_ranks_draft_lengths_where_the_rate_ranks_them_wrong():
    # k = 2: 100 passes, 180 of 200 drafts taken (rate 0.9), 280 tokens: L = 2.8.
    # k = 8: 100 passes, 400 of 800 taken (rate 0.5), 500 tokens: L = 5.0.
    short = summarise(arr(280), arr(180), arr(200), arr(np.nan), arr(np.nan))
    long = summarise(arr(500), arr(400), arr(800), arr(np.nan), arr(np.nan))
    assert short.length == pytest.approx(2.8) and long.length == pytest.approx(5.0)
    assert 180 / 200 > 400 / 800 and long.length > short.length


def test_the_length_pools_tokens_over_passes_and_skips_impossible_counts():
    got = summarise(arr(100, 300, 10, np.nan), arr(0, 200, 10, 5), arr(0, 400, 20, 5),
                    arr(np.nan) * 4, arr(np.nan) * 4)  # fmt: skip
    assert got.requests == 2 and got.length == pytest.approx(400 / 200)
    assert np.isnan(passes(arr(10), arr(12))).all()


def test_the_loop_signature_needs_near_full_drafts_and_collapsing_distinct_2():
    # k = 4 on every pass: 100 passes, 400 drafted; 390 taken: L = 4.9 of 5.
    full = dict(output=arr(490, 490, 300), accepted=arr(390, 390, 200), drafted=arr(400, 400, 400))
    flags = looping(**full, distinct_2=arr(0.2, 0.8, 0.2), baseline_distinct_2=arr(0.9, 0.9, 0.9))
    assert list(flags) == [True, False, False]  # varied answer; half-taken drafts


def test_acceptance_of_reads_pair_records_and_leaves_control_pairs_out():
    def record(output: int, accepted: int, d2: float, control: bool = False) -> dict:
        cand = {"output_tokens": output, "accepted_tokens": accepted, "draft_tokens": 400,
                "distinct_2": d2}  # fmt: skip
        return {"is_control": control, "candidate": cand, "baseline": {"distinct_2": 0.9}}

    got = acceptance_of([record(490, 390, 0.1), record(300, 200, 0.8), record(50, 0, 0.1, True)])
    assert got.requests == 2 and got.looping == 1 and got.compared == 2
    assert got.length == pytest.approx(790 / 200)
    assert acceptance_of([{"candidate": None, "baseline": None}]).length is None
