"""Routes that refuse connections: marked down for a doubling back-off, then probed.

A Kubernetes Service whose pods are all gone (a canary scaled to zero) refuses or
times out every connection. The gateway then stops calling it as a candidate until a
back-off passes, lets one probe through, and forgets the state on the first connection
that answers. A route is proven down only once a probe is refused too: one refused
connection may be a blip (a pod restarting), and the calls skipped before the probe
says otherwise are not the candidate's failures. Everything here is plain dict work on
the event loop: no locks, no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

# The error of a candidate call skipped while its route is proven down: a route failure
# (the candidate cannot answer), and what the gate's down-time check looks for.
ROUTE_DOWN = "candidate route down"
# Why a candidate call skipped after one refused connection is dropped: until the probe
# after the back-off is refused too, the route may well be back (not attributable).
ROUTE_UNPROVEN = "candidate route refused a connection (not yet proven down)"

Clock = Callable[[], float]
# Told a route's name and whether it is now down (for the gauge).
OnChange = Callable[[str, bool], None]


@dataclass
class _Down:
    name: str
    failures: int
    backoff_s: float
    probe_at: float  # clock time the next probe may go
    probing: bool = False  # a probe went since the last failure
    proven: bool = False  # a probe was refused: the route is down, not blipping


class RouteHealth:
    """Per-route down state, fed by the outcome of each call's connection attempt."""

    def __init__(
        self,
        *,
        backoff_s: float,
        max_backoff_s: float,
        on_change: OnChange | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._backoff_s = backoff_s
        self._max_backoff_s = max(max_backoff_s, backoff_s)
        self.on_change = on_change
        self._clock = clock
        self._down: dict[int, _Down] = {}

    def admit(self, route_id: int) -> bool:
        """True when a call may go to the route: it is up, or this call is the probe
        after its back-off (the calls after it skip until the probe's own back-off)."""
        down = self._down.get(route_id)
        if down is None:
            return True
        now = self._clock()
        if now < down.probe_at:
            return False
        down.probe_at = now + down.backoff_s
        down.probing = True
        return True

    def connect_failed(self, route_id: int, name: str) -> None:
        """Mark the route down (again): the back-off doubles up to its cap."""
        down = self._down.get(route_id)
        if down is None:
            down = self._down[route_id] = _Down(name, 0, self._backoff_s, 0.0)
            if self.on_change is not None:
                self.on_change(name, True)
        elif down.probing:
            # Only a failed probe doubles it: calls already under way when the route
            # went down fail together, and count as one.
            down.backoff_s = min(down.backoff_s * 2, self._max_backoff_s)
            down.probing, down.proven = False, True
        down.failures += 1
        down.probe_at = self._clock() + down.backoff_s

    def skip_reason(self, route_id: int) -> str:
        """Return why a call the route did not admit is skipped: down, or not yet proven."""
        down = self._down.get(route_id)
        return ROUTE_DOWN if down is not None and down.proven else ROUTE_UNPROVEN

    def connected(self, route_id: int) -> None:
        """The route answered: it is up again."""
        if self._down:  # the usual case is a dict that is empty
            down = self._down.pop(route_id, None)
            if down is not None and self.on_change is not None:
                self.on_change(down.name, False)

    def detail(self) -> dict[str, dict[str, float | int]]:
        """The routes down now, by name: connection failures in a row and next probe."""
        now = self._clock()
        return {
            d.name: {"failures": d.failures, "probe_in_s": round(max(d.probe_at - now, 0.0), 3)}
            for d in self._down.values()
        }
