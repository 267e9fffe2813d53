"""Interval formulas against their definitions and a published example."""

from __future__ import annotations

import pytest

from gate.errors import BadRequest
from gate.reports.intervals import Z95, newcombe, wilson
from gate.reports.model import Distribution, Week


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (81, 263), (263, 263), (1, 1000)])
def test_wilson_bounds_solve_the_score_equation(k, n):
    interval = wilson(k, n)
    p = k / n
    for bound in (interval.low, interval.high):
        if 1e-12 < bound < 1 - 1e-12:
            assert (p - bound) ** 2 == pytest.approx(Z95**2 * bound * (1 - bound) / n, rel=1e-9)
    assert interval.low <= p <= interval.high


def test_wilson_of_nothing_is_the_whole_range():
    empty = wilson(0, 0)
    assert (empty.low, empty.high, empty.rate) == (0.0, 1.0, None)


def test_newcombe_matches_the_published_example():
    # Newcombe (1998), Statistics in Medicine 17:873, example (a): 56/70 - 48/80, method 10.
    d = newcombe(wilson(56, 70), wilson(48, 80))
    assert d is not None
    assert (d.estimate, round(d.low, 4), round(d.high, 4)) == (pytest.approx(0.2), 0.0524, 0.3339)


def test_weeks_parse_and_step_back_across_years():
    week = Week.parse("2026-W01")
    assert week.start.isoformat() == "2025-12-29T00:00:00+00:00"
    assert str(week.previous()) == "2025-W52"
    assert (week.end - week.start).days == 7
    for bad in ("2026-47", "2026-W54", "W47", "2026-W00"):
        with pytest.raises(BadRequest):
            Week.parse(bad)


def test_quantile_interval_widens_as_samples_shrink():
    grid = tuple(i / 100 for i in range(101))
    many, few = Distribution(10_000, grid), Distribution(50, grid)
    assert (
        many.interval(0.5)[1] - many.interval(0.5)[0] < few.interval(0.5)[1] - few.interval(0.5)[0]
    )
    assert few.interval(0.99)[1] == 1.0


def test_a_load_band_without_a_bounded_interval_says_so_instead_of_0_to_inf() -> None:
    from gate.reports.guardrails import band_row

    young = {"band": "4-8", "n": 13, "ratio": 0.88, "lower": 0.0, "upper": None}
    row = band_row({**young, "candidate_load": 6.7, "baseline_load": 62.9, "proven": False})
    assert row[2] == "1.14 (too few pairs for an interval)"
    grown = {**young, "n": 653, "lower": 0.75, "upper": 0.83, "proven": True}
    assert band_row(grown)[2] == "1.14 [1.2, 1.33]"
