"""Acceptance-collapse detection: a Shiryaev-Roberts procedure with a false-alarm budget.

A sudden fall of the draft acceptance rate travels with corrupted output (a wrong draft
model, a broken KV cache), so it is a kill reason of its own, faster than the floor test
that averages the whole rollout.

Method. After warm-up, the segment's pre-change level `m0 = collapse_ratio * warm-up
mean acceptance` is fixed. Each request with acceptance rate r in [0, 1] contributes the
e-value `e = 1 + lam (m0 - r)`, lam = `bet / (1 - m0)`: while the stream's mean stays at or
above m0, E[e] <= 1; after a collapse below m0 the product of e-values grows. The
Shiryaev-Roberts statistic R_t = e_t (R_{t-1} + 1) (Shiryaev; Roberts; the e-value form
follows Shin, Ramdas and Rinaldo, "E-detectors") satisfies E[R_t] <= t before any change,
so R_t + T - t is a nonnegative supermartingale from R_0 + T = T and Ville's inequality gives
P(max_{t <= T} R_t >= T / alpha) <= alpha: with the alarm
threshold log(T / alpha) the chance of any false alarm within the first T requests of the
segment is at most alpha. Assumption: before a change, each request's expected
acceptance given the past is at least m0 (true for i.i.d. requests whose mean is m0 / ratio).

Episodes (conversations, agent runs; issue 39). A conversation that accepts few drafts on
its first turn accepts few on its later ones, so a later turn's e-value has mean above 1
given the turns before it, and the bound fails (A/A, agents one or two at a time with a
third of their runs hard throughout: 95 % of runs alarmed). So where pairs name episodes
the detectors read each episode's first pair only (`gate.stats.cumulative`; in the fold,
`opens` in `gate.verdicts.slices`), and m0 is fixed from the warm-up's first pairs alone
(`gate.verdicts.warmup`): a first turn's level need not be a later turn's. What is
conditioned on: episodes independent of one another, and an episode's first request
with expected acceptance at least m0; given every earlier request (all of other
episodes) its e-value then has mean <= 1, and the bound above holds with T counting
episodes. Which pair opens an episode depends on arrival order only: its first over the
whole rollout, so a conversation begun in an earlier stage opens nothing in a later one
(docs/gate.md). Where every episode is one pair, every pair is read, as before.
Cost: a collapse is seen only in the conversations that start after it (simulated,
5-20 turns, 40 open at once: median 1,100 pairs from the collapse to the alarm, against
90 read pair by pair).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gate.stats.sequences import FloatArray

DEFAULT_BET = 0.8


@dataclass(frozen=True)
class CollapseState:
    """The detector after `n` requests: current and running-maximum log statistic."""

    n: int = 0
    log_sr: float = -np.inf
    max_log_sr: float = -np.inf


def log_evalues(rates: FloatArray, m0: float | FloatArray, bet: float = DEFAULT_BET) -> FloatArray:
    """Return log e-values of per-request acceptance rates against the level `m0`.

    Args:
        rates: per-request acceptance rates in [0, 1].
        m0: the pre-change level (a fraction of the warm-up mean).
        bet: fraction of the largest admissible bet, in (0, 1).

    Returns:
        log(1 + lam (m0 - r)) per request.
    """
    lam = bet / np.maximum(1.0 - np.asarray(m0), 1e-9)
    return np.asarray(np.log1p(lam * (m0 - np.clip(rates, 0.0, 1.0))), dtype=np.float64)


def log_sr_path(log_e: FloatArray, start: float = -np.inf) -> FloatArray:
    """Return log R_t after each request, starting from log R_0 = `start`.

    Uses R_t = P_t (R_0 + sum_{k <= t} 1 / P_{k-1}) with P_t the running product of
    e-values, so the recursion becomes cumulative sums and one cumulative log-sum-exp.

    Args:
        log_e: log e-values in request order along the last axis.
        start: the statistic before the first of them.

    Returns:
        log R_t, same shape as `log_e`.
    """
    cum = np.cumsum(log_e, axis=-1)
    shifted = np.concatenate([np.zeros_like(cum[..., :1]), cum[..., :-1]], axis=-1)
    acc = np.logaddexp.accumulate(-shifted, axis=-1)
    return np.asarray(cum + np.logaddexp(start, acc), dtype=np.float64)


def update(state: CollapseState, log_e: FloatArray) -> CollapseState:
    """Advance the detector over new requests' log e-values."""
    if log_e.size == 0:
        return state
    path = log_sr_path(log_e, state.log_sr)
    return CollapseState(
        n=state.n + int(log_e.size),
        log_sr=float(path[-1]),
        max_log_sr=max(state.max_log_sr, float(path.max())),
    )


def log_threshold(horizon: int, alpha: float) -> float:
    """Return the alarm level log(T / alpha) for a false-alarm budget over T requests."""
    return float(np.log(horizon / alpha))
