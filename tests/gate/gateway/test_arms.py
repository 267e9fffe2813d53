"""Which arm a sampled request is mirrored to (issue 40): shares by the arms' weights
(equal by default), sticky by the request's key, and a kill, an added arm or a new weight
moves only the episodes it must."""

from __future__ import annotations

import math
from collections import Counter

from gate.gateway.sampling import choose_arm, unit_hash
from gate.routing.snapshot import Arm, RouteTarget

KEYS = [f"episode-{n}".encode() for n in range(30_000)]


def arm(name: str, weight: float = 1.0) -> Arm:
    route = RouteTarget(id=1, name=name, base_url="http://x", model="m", fingerprint="f")
    return Arm(name, route, salt=f"arm:{name}".encode(), weight=weight)


def chosen(arms: tuple[Arm, ...]) -> dict[bytes, str]:
    return {key: choose_arm(7, key, arms).name for key in KEYS}


def test_active_arms_get_equal_shares():
    shares = Counter(chosen((arm("k2"), arm("k4"), arm("k8"))).values())
    # Binomial(30000, 1/3): a standard deviation of about 82 requests.
    assert all(abs(n - 10_000) < 400 for n in shares.values()), shares


def test_a_killed_arm_moves_only_its_own_episodes():
    before = chosen((arm("k2"), arm("k4"), arm("k8")))
    after = chosen((arm("k2"), arm("k8")))
    assert all(after[key] == was for key, was in before.items() if was != "k4")


def test_an_added_arm_takes_an_equal_share_from_each():
    before = chosen((arm("k2"), arm("k4")))
    after = chosen((arm("k2"), arm("k4"), arm("k8")))
    moved = [key for key in KEYS if after[key] != before[key]]
    assert all(after[key] == "k8" for key in moved)
    assert abs(len(moved) - 10_000) < 400
    assert abs(Counter(before[key] for key in moved)["k2"] - 5_000) < 300


def test_the_choice_does_not_depend_on_the_order_of_the_arms():
    arms = (arm("k2"), arm("k4"), arm("k8"))
    assert choose_arm(7, b"conv-1", arms) == choose_arm(7, b"conv-1", tuple(reversed(arms)))


def test_at_equal_weights_the_weighted_choice_is_the_highest_hash_as_before():
    for weight in (1.0, 0.25):
        arms = (arm("k2", weight), arm("k4", weight), arm("k8", weight))
        highest = {key: max(arms, key=lambda a: unit_hash(7, key, a.salt)).name for key in KEYS}
        assert chosen(arms) == highest


def within_binomial(count: int, n: int, p: float) -> bool:
    """Return whether `count` of `n` is within 5 standard deviations of Binomial(n, p)'s mean
    (a false alarm about once in 3.5 million runs; the keys are fixed, so it never flakes)."""
    return abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p))


def test_weights_1_to_a_quarter_give_shares_of_four_fifths_and_one_fifth():
    got = Counter(chosen((arm("k2"), arm("k4", 0.25))).values())
    assert within_binomial(got["k4"], len(KEYS), 0.2), got
    assert not within_binomial(got["k4"], len(KEYS), 0.25)  # the bound tells them apart


def test_lowering_a_weight_moves_only_episodes_from_that_arm():
    before = chosen((arm("k2"), arm("k4"), arm("k8")))
    after = chosen((arm("k2"), arm("k4", 0.25), arm("k8")))
    moved = [key for key in KEYS if after[key] != before[key]]
    assert all(before[key] == "k4" for key in moved)
    # k4's share falls from 1/3 to 0.25 / 2.25 = 1/9: the least that can move is 2/9.
    assert within_binomial(len(moved), len(KEYS), 2 / 9), len(moved)
