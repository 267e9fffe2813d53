"""The exact distribution each verifier emits at one drafted position, and its distance.

With a draft that is a point mass on d (n-gram, prompt lookup), a verifier that accepts d
with probability a(d) and otherwise samples p without d emits d with probability a(d) and any
other x with probability (1 - a(d)) p(x) / (1 - p(d)), so its total variation from p is
|a(d) - p(d)| (Leviathan et al. 2023 give the exact rule, a = p). `redraw` is that form with
a(d) = p(d)(2 - p(d)) (a second draw from p may give d), so its TV is p(d)(1 - p(d));
`biased-argmax` emits d surely when d is the argmax, else samples p; `ignore-top-p` emits
the untruncated distribution. `bench/verifier_tv.py` averages these over answers.
"""

from __future__ import annotations

from typing import Any

from gate.engines.decode import VERIFIERS, Position, target_probs


def emitted_distribution(torch: Any, verifier: str, at: Position, draft: int) -> Any:
    """Return the distribution of the token `verifier` emits at `at` for `draft` (fp64).

    Args:
        torch: the torch module.
        verifier: a name in `VERIFIERS`.
        at: the position: the target's logits, the request's sampling and its `probs`.
        draft: the drafted token (a point-mass draft).

    Returns:
        A vector over the vocabulary summing to 1.
    """
    if verifier not in VERIFIERS:
        raise ValueError(f"unknown verifier {verifier!r}")
    probs = at.probs.double()
    if verifier == "exact":
        return probs
    if verifier == "biased-argmax":
        return _point(torch, probs, draft) if draft == int(torch.argmax(probs)) else probs
    if verifier == "redraw":  # the draft once more with its own probability
        return _accept_or_residual(torch, probs * (2.0 - probs), probs, draft)
    if verifier == "ignore-top-p":
        return target_probs(torch, at.logits, at.temperature, 1.0)
    return _accept_or_residual(torch, _acceptance(torch, verifier, at), probs, draft)


def token_tv(torch: Any, verifier: str, at: Position, draft: int) -> float:
    """Return the total variation between what `verifier` emits at `at` and the target."""
    emitted = emitted_distribution(torch, verifier, at, draft)
    return 0.5 * float((emitted - at.probs.double()).abs().sum())


def _acceptance(torch: Any, verifier: str, at: Position) -> Any:
    """Return the distribution whose value at the draft is the acceptance probability."""
    if verifier == "accept-t1":
        return target_probs(torch, at.logits, 1.0, at.top_p)
    if verifier == "accept-bf16":
        return target_probs(torch, at.logits.bfloat16(), at.temperature, at.top_p)
    raise ValueError(f"no closed form for verifier {verifier!r}")


def _accept_or_residual(torch: Any, accept: Any, probs: Any, draft: int) -> Any:
    """Return the law of: keep `draft` with accept[draft], else draw `probs` without it."""
    kept, own = float(accept[draft]), float(probs[draft])
    if own >= 1.0:  # nothing else to emit: the verifier keeps the draft
        return _point(torch, probs, draft)
    emitted = probs * ((1.0 - kept) / (1.0 - own))
    emitted[draft] = kept
    return emitted


def _point(torch: Any, probs: Any, token: int) -> Any:
    point = torch.zeros_like(probs)
    point[token] = 1.0
    return point
