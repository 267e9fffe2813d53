"""Is a route up? One short GET of its `/models`, for Flagger's readiness hooks."""

from __future__ import annotations

import httpx

from gate.db.models import Route

# Two probes must fit in the 15 s the example Canary gives each hook.
TIMEOUT_S = 5.0


def route_problem(route: Route) -> str | None:
    """Return None when the route answers below 500, else why it does not."""
    try:
        response = httpx.get(f"{route.base_url}/models", timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        return f"unreachable ({type(exc).__name__})"
    if response.status_code >= 500:
        return f"answered HTTP {response.status_code}"
    return None
