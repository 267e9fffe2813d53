"""The crossover's two sources, read without the store: a rehearsal's levels and a
verdict's load bands, and the choice of the more recent proven one."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from gate.db.models import Rehearsal
from gate.routing.crossover import (
    LOAD_BANDS,
    REHEARSAL,
    ByLoad,
    from_bands,
    from_rehearsal,
    newest_proven,
)
from tests.factories import rehearsal_summary

NOW = datetime(2026, 11, 28, 12, tzinfo=UTC)


def band(load: float, lower: float, upper: float) -> dict[str, object]:
    """A verdict's band: candidate latency / baseline's, its interval, the mean load."""
    return {"band": "b", "ratio": math.sqrt(lower * upper), "lower": lower, "upper": upper,
            "n": 80, "candidate_load": load, "baseline_load": 4.0, "proven": False}  # fmt: skip


def test_the_bands_cross_over_above_the_load_of_the_highest_winning_band():
    bands = [band(0.6, 0.7, 0.8), band(2.7, 0.8, 0.95), band(5.2, 0.9, 1.1), band(9.4, 1.1, 1.3)]
    cross = from_bands(bands, NOW)
    assert cross is not None and cross.source == LOAD_BANDS
    assert cross.measured_at == NOW.timestamp()
    seg = cross.of("creative")  # the bands pool every segment
    assert (seg.level, seg.low, seg.high) == (3, 3, 10)
    assert seg.text == "between 3 and 10 running requests"


def test_a_win_above_a_band_proven_to_lose_never_routes_the_loads_in_between():
    # Wins at ~1, proven to lose at ~4, wins again at ~8: the loads from 4 up stay with
    # the baseline (the highest win alone would send them to the slower candidate).
    bands = [band(1.0, 0.7, 0.9), band(4.0, 1.2, 1.5), band(8.0, 0.8, 0.95)]
    cross = from_bands(bands, NOW)
    assert cross is not None
    seg = cross.of("all")
    assert (seg.level, seg.low, seg.high) == (2, 2, 4)


def test_bands_that_prove_nothing_are_no_source_and_losing_ones_say_never():
    assert from_bands([band(1.0, 0.9, 1.1), band(4.0, 0.95, 1.2)], NOW) is None
    assert from_bands([band(1.0, 0.0, math.inf)], NOW) is None  # too few pairs
    losing = from_bands([band(1.0, 0.9, 1.1), band(4.2, 1.05, 1.2)], NOW)
    assert losing is not None and losing.of("all").level == 0
    assert losing.of("all").text == "at or below 5 running requests (no band proven to win)"


def rehearsal(run_at: datetime) -> Rehearsal:
    summary = rehearsal_summary()
    return Rehearsal(rollout_id=1, summary=summary, run_at=run_at, recorded_at=run_at)


def test_the_more_recent_proven_source_routes():
    rehearsed = from_rehearsal(rehearsal(NOW - timedelta(hours=2)))
    live = from_bands([band(5.5, 0.8, 0.9)], NOW - timedelta(hours=1))
    assert rehearsed is not None and live is not None
    assert newest_proven(rehearsed, live) is live
    older = from_bands([band(5.5, 0.8, 0.9)], NOW - timedelta(hours=3))
    assert newest_proven(rehearsed, older) is rehearsed
    assert newest_proven(rehearsed, None) is rehearsed
    assert newest_proven(None, live) is live and newest_proven(None, None) is None


def test_an_unproven_rehearsal_yields_to_older_proven_bands():
    summary = rehearsal_summary()
    summary["crossover"]["all"] = {"low": None, "high": None, "text": "could not tell"}
    unproven = from_rehearsal(Rehearsal(rollout_id=1, summary=summary, run_at=NOW))
    live = from_bands([band(3.0, 0.8, 0.9)], NOW - timedelta(days=1))
    assert unproven is not None and unproven.source == REHEARSAL
    assert newest_proven(unproven, live) is live
    assert newest_proven(unproven, None) is unproven  # routes as before: level 0


def test_a_segment_that_won_at_every_level_routes_up_to_the_highest_swept():
    summary = rehearsal_summary()
    top = summary["levels"][-1]
    top["segments"]["copy"]["call"] = "wins"
    summary["crossover"]["copy"] = {"low": None, "high": None, "text": "none within the sweep"}
    cross = from_rehearsal(Rehearsal(rollout_id=1, summary=summary, run_at=NOW))
    assert cross is not None
    assert cross.of("copy").level == top["concurrency"]
    assert cross.of("creative").level == 0  # never proven to win


def test_bands_measured_longer_ago_than_the_policy_allows_are_stale():
    live = from_bands([band(5.5, 0.8, 0.9)], NOW - timedelta(days=8))
    by_load = ByLoad(hysteresis=1, max_age_s=7 * 86400.0, crossover=live)
    assert by_load.stale(NOW.timestamp())
    assert by_load.effective(NOW.timestamp()) == ("stale", {"all": 0})
    fresh = ByLoad(1, 7 * 86400.0, from_bands([band(5.5, 0.8, 0.9)], NOW))
    assert fresh.effective(NOW.timestamp()) == (LOAD_BANDS, {"all": 6})


def _arm(name: str, state, decision, verdict):
    from gate.stats.acceptance_length import AcceptanceLength
    from gate.stats.arms_replay import ArmResult

    return ArmResult(name=name, state=state, decision=decision, pairs=10, ratio=1.2,
                     lower=1.1, upper=1.3, verdict=verdict,
                     acceptance=AcceptanceLength(None, 0, 0, 0))  # fmt: skip


def test_the_arm_whose_bands_a_verdict_shows_is_the_one_routing_reads():
    # `gate.verdicts.arms.rollout_verdict` picks the bands; `shown_in` (what the crossover
    # reads a stored choice with) must name the arm they are from, or a promoted arm's own
    # bands are dropped (or another's taken).
    from gate.db.enums import Decision
    from gate.stats.arms import ArmState
    from gate.stats.arms_replay import ArmsReplayResult, shown_in, to_json
    from gate.stats.verdict import BandResult, VerdictResult
    from gate.verdicts.arms import rollout_verdict

    def verdict(load: float) -> VerdictResult:
        band = BandResult("<2", 1.2, 1.1, 1.3, 50, load, 1.0, True)
        return VerdictResult(Decision.KILL, ("kill_latency",), "kill", (), 50, bands=(band,))

    for arms, winner, leader in [
        ((_arm("k2", ArmState.KILLED, Decision.KILL, verdict(2.0)),), None, None),
        ((_arm("k2", ArmState.RUNNING, Decision.CONTINUE, verdict(2.0)),), None, "k2"),
        ((_arm("k2", ArmState.KILLED, Decision.KILL, None),
          _arm("k4", ArmState.KILLED, Decision.KILL, verdict(4.0))), None, None),
    ]:  # fmt: skip
        got = ArmsReplayResult(Decision.KILL, 10, True, 1, 10, winner, leader, arms)
        load = rollout_verdict(got).bands[0].candidate_load
        by_load = {a.verdict.bands[0].candidate_load: a.name for a in arms if a.verdict}
        assert shown_in(to_json(got)) == by_load[load]
