"""Which arm a sampled request is mirrored to (issue 40): equal shares, sticky by the
request's key, and a kill or an added arm moves only the episodes it must."""

from __future__ import annotations

from collections import Counter

from gate.gateway.sampling import choose_arm
from gate.routing.snapshot import Arm, RouteTarget

KEYS = [f"episode-{n}".encode() for n in range(30_000)]


def arm(name: str) -> Arm:
    route = RouteTarget(id=1, name=name, base_url="http://x", model="m", fingerprint="f")
    return Arm(name, route, salt=f"arm:{name}".encode())


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
