"""Who a sampled pair's calls ask for log-probabilities, from the rollout's policy.

Parity (`guardrails.output_parity`) asks both sides alike for the sampled tokens' own;
exactness (`guardrails.exactness`) asks the candidate for `top_logprobs`, and the
baseline on the policy's control share of pairs. A request that cannot make a pair the
statistics read is asked for nothing (`logprobs.pairable`).
"""

from __future__ import annotations

from typing import Any

from gate.gateway import logprobs
from gate.gateway.call import Gateway
from gate.gateway.sampling import unit_hash
from gate.routing.snapshot import RolloutRouting, RouteTarget


def asked(
    gw: Gateway, routing: RolloutRouting, paired: RouteTarget, body: dict[str, Any], key: bytes
) -> tuple[dict[str, Any] | None, dict[str, Any] | None] | None:
    """Return the bodies asking a sampled pair's (baseline, candidate) calls for the
    logprobs the policy reads (None: a side sends the client's body), or None when
    neither side asks (`paired`: the pair's candidate route, its arm's where it has
    one). Parity asks both sides for the sampled tokens' own; exactness asks the
    candidate for `top_logprobs`, and the baseline on the policy's control share of
    pairs (by the hash of the request's episode, so a request, and every request of its
    episode, is asked the same way every time)."""
    if not _may_ask(gw, routing, paired, body):
        return None
    parity = gw.settings.ask_logprobs == "on" or routing.parity
    exactness = routing.exactness
    top = exactness.top_logprobs if exactness is not None else None
    baseline_too = exactness is not None and (
        unit_hash(routing.rollout_id, key, b"exactness") < exactness.control_share
    )
    candidate = logprobs.ask(body, top=top) if top or parity else None
    if not (baseline_too or parity):
        return None if candidate is None else (None, candidate)
    if candidate is not None and (baseline_too or top is None):
        return candidate, None  # asked alike: the two sides send one payload
    return logprobs.ask(body, top=top if baseline_too else None), candidate


def _may_ask(
    gw: Gateway, routing: RolloutRouting, paired: RouteTarget, body: dict[str, Any]
) -> bool:
    """Whether a sampled pair's calls may ask for logprobs the client did not: at
    temperature > 0, where the client's request says nothing of them and can make a pair
    the statistics read (no fixed seed, one answer), where the setting is not off, and
    where neither route has rejected them."""
    if gw.settings.ask_logprobs == "off" or not logprobs.samples(body):
        return False
    if logprobs.left_alone(body) or not logprobs.pairable(body):
        return False
    routes = (routing.baseline.id, paired.id)
    return all(gw.rejecting.may_ask(route) for route in routes)
