"""The rehearsal's statistics: the speedup's interval, the crossover as an interval, and the
exit decision at a production concurrency, on hand-built samples."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gate.rehearse.analysis import RehearsalAnswer, crossover, decide, level_call, speedup
from gate.rehearse.runner import Sample


def samples(seconds_per_token: float, n: int = 40, seed: int = 1) -> list[Sample]:
    rng = np.random.default_rng(seed)
    return [
        Sample("chat", ok=True, ttft_s=0.01, e2e_s=seconds_per_token * 20 * f, tokens=20)
        for f in rng.uniform(0.9, 1.1, n)
    ]


def test_a_candidate_twice_as_fast_has_an_interval_around_two():
    value = speedup(samples(0.02), samples(0.01, seed=2))
    assert value is not None
    assert 1.85 < value.low < value.estimate < value.high < 2.15
    assert value.call == "wins"


def test_failed_requests_do_not_count_and_too_few_give_no_speedup():
    failed = [Sample("chat", ok=False, e2e_s=9.0)] * 10
    assert speedup(samples(0.02) + failed, samples(0.01)) == speedup(samples(0.02), samples(0.01))
    assert speedup(samples(0.02, n=1), samples(0.01)) is None


def test_the_crossover_is_an_interval_between_the_last_win_and_the_first_loss():
    levels = [1, 2, 4, 8]
    found = crossover(levels, ["wins", "wins", "unclear", "loses"])
    assert (found.low, found.high) == (2, 8)
    assert crossover(levels, ["wins"] * 4).text.startswith("none within the sweep")
    above = crossover(levels, ["wins", "unclear", "unclear", "unclear"])
    assert (above.low, above.high) == (1, None)
    below = crossover(levels, ["loses"] * 4)
    assert (below.low, below.high) == (None, 1)
    # A win proven at a higher load outweighs an unclear lower level (gain falls with load).
    assert crossover(levels, ["unclear", "wins", "wins", "wins"]).text.startswith("none within")
    late = crossover(levels, ["unclear", "wins", "unclear", "loses"])
    assert (late.low, late.high) == (2, 8)
    assert crossover(levels, ["unclear"] * 4).text.startswith("could not tell")


def test_the_decision_assumes_gain_falls_with_load():
    levels = [1, 2, 4, 8]
    calls = ["wins", "wins", "unclear", "loses"]
    assert decide(levels, calls, 2) == RehearsalAnswer.PAYS
    assert decide(levels, calls, 3) == RehearsalAnswer.CANNOT_TELL  # 4 is unclear, 2 does not lose
    assert decide(levels, calls, 8) == RehearsalAnswer.DOES_NOT_PAY
    assert decide(levels, ["wins"] * 4, 16) == RehearsalAnswer.CANNOT_TELL  # above the sweep
    assert decide(levels, ["wins", "loses", "loses", "loses"], 3) == RehearsalAnswer.DOES_NOT_PAY


def test_answers_are_paired_by_request_so_the_prompt_mix_cancels_out():
    # Requests differ tenfold in seconds per token; the candidate halves each one.
    rng = np.random.default_rng(3)
    base, cand = [], []
    for i, scale in enumerate(rng.uniform(0.01, 0.1, 30)):
        base.append(Sample("chat", ok=True, e2e_s=scale * 20, tokens=20, item=f"r{i}"))
        cand.append(
            Sample(
                "chat", ok=True, e2e_s=scale * 10 * rng.uniform(0.97, 1.03), tokens=20, item=f"r{i}"
            )
        )
    cand.reverse()  # answers arrive in another order: matched by request, not position
    value = speedup(base, cand)
    assert value is not None and 1.95 < value.low < value.high < 2.05
    # A request answered on one side only is left out.
    extra = Sample("chat", ok=True, e2e_s=9.0, tokens=1, item="x")
    assert speedup([*base, extra], cand) == value


def test_a_faster_candidate_that_fails_more_requests_does_not_win_the_level():
    # Twice as fast on the answers it gives, but a quarter of its requests fail (the
    # baseline's none): the speedup leaves failures out, so the level must not read "wins"
    # and a pipeline deploying on exit 0 must not see "pays".
    base = [replace(s, item=f"r{i}") for i, s in enumerate(samples(0.02))]
    cand = [replace(s, item=f"r{i}", ok=i % 4 != 0) for i, s in enumerate(samples(0.01, seed=2))]
    assert speedup(base, cand) is not None and speedup(base, cand).call == "wins"
    call = level_call(base, cand)
    assert call != "wins"
    assert decide([1], [call], 1) is not RehearsalAnswer.PAYS
    # As many failures on both sides: the speed alone decides.
    broken = [replace(s, ok=i % 4 != 0) for i, s in enumerate(base)]
    assert level_call(broken, cand) == "wins"
