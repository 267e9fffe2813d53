"""Waiting on a condition with a deadline: how tests synchronise, never with fixed sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], timeout: float = 30.0) -> bool:
    """Poll `condition` until it holds or `timeout` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())
