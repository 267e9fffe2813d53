"""Seeded simulated pairs: a `Scenario`, the pair columns it draws, and those as records.

`draw_pairs` draws whole rollouts of pairs (runs x pairs arrays) for `gate.stats.simulate`
to judge; `to_records` writes one run in the replay JSONL schema.

Simulated pair (defaults; shadow mode, both routes see every request):
* segment uniform over the policy's segments; a pair arrives every 1 / `pairs_per_s` s;
* latency: per request a log-normal factor with sd `shared_log_sd` (0.5) shared by both
  sides, times an independent per-call log-normal factor with sd `call_log_sd` (0.25),
  on segment medians (TTFT 0.2-0.6 s, TPOT 18-24 ms, 80-400 output tokens whose count is
  shared); e2e = TTFT + TPOT x tokens; the candidate's TPOT is scaled by `tpot_ratio`;
  a `tail_share` of candidate requests gets `tail_extra_s` more TTFT;
* failures: each call fails independently with `error_rate` (0.3%); a failed side fails
  every evaluator;
* evaluators: per evaluator, baseline pass rate `pass_rate` (0.85) with `discordant`
  (5%) of pairs disagreeing half each way; a drop d moves d of the both-pass pairs to
  baseline-only pass;
* acceptance: the candidate's per-request rate ~ Beta with segment means 0.5-0.8 and
  concentration 10 (Beta(1, 9) from `collapse_at` on);
* undeclared segments: `undeclared_share` of requests carry a segment the policy does
  not declare (latencies as the last declared segment's); `collapse_segment` confines
  the collapse to one segment (`undeclared` for those);
* load (only when `baseline_load` > 0): per pair the baseline's running requests ~
  Poisson(`baseline_load`) and the candidate's ~ Poisson(`share` x `baseline_load`)
  (shadow: the candidate carries its stage's share of the traffic); with `gain_at`
  = (g1, g100) the candidate's TPOT is scaled by 1 - g(c), g linear in the candidate's
  load as a share c of the mean baseline load, g(0.01) = g1 and g(1) = g100;
* cancels: the client gives up on a call it waits on with `cancel_rate` (0), on a
  candidate-served one with `candidate_cancel_rate` (canary; in shadow the client waits
  only on the baseline); a cancelled pair is dropped from every other cell.
* episodes (`episode_len` set, e.g. (5, 20)): requests come in conversations of a length
  uniform in that range, `concurrent` of them open at a time on average, interleaved in
  time (each conversation's requests a unit-mean exponential think time apart, new ones
  starting as a Poisson process); a conversation has one segment and, per route, a random
  effect on log TPOT and, separately, log TTFT with variance icc / (1 - icc) x
  `call_log_sd`^2, so `episode_icc` is the intra-episode correlation of the paired
  log-ratios and both routes keep one distribution; a shared episode effect (sd
  `shared_log_sd` x sqrt(icc)) makes a hard conversation slower on both routes. The
  pair's `episode` column carries it.
* sampled-output parity (`sampler` set: `exact` or `biased`): each pair draws a prompt and
  one answer per side from pools generated with the engine's real decode loop and
  verifiers (`gate.engines.answer_pools`; baseline plain sampling at T 0.8, candidate n-gram
  speculation with that verifier); a pair whose side hit the length limit is ineligible.
  Every simulated answer has complete log-probabilities, so the mean log-prob is tested.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gate.db.enums import RolloutMode
from gate.stats.columns import PairColumns
from gate.stats.ids import UNDECLARED
from gate.stats.policy import Policy
from gate.stats.sequences import BoolArray, FloatArray, IntArray

TTFT_S = np.array([0.35, 0.25, 0.60, 0.20, 0.20])
TPOT_S = np.array([0.020, 0.018, 0.022, 0.020, 0.024])
TOKENS = np.array([300.0, 80.0, 150.0, 200.0, 400.0])
ACCEPTANCE = np.array([0.75, 0.80, 0.70, 0.60, 0.50])
# Pairs of a segment the policy does not declare: index -1 in columns, this name in records.
UNDECLARED_INDEX = -1
UNDECLARED_NAME = "unlisted"


@dataclass(frozen=True)
class Scenario:
    """A simulated rollout: how many pairs, how often the gate looks, what changed."""

    name: str
    pairs: int = 3000
    every: int = 10
    tpot_ratio: float = 1.0
    eval_drops: tuple[float, ...] = (0.0, 0.0)
    tail_share: float = 0.0
    tail_extra_s: float = 2.0
    shared_log_sd: float = 0.5
    call_log_sd: float = 0.25
    pass_rate: float = 0.85
    discordant: float = 0.05
    error_rate: float = 0.003
    pairs_per_s: float = 1.0
    # From this pair on, the candidate's acceptance collapses to Beta(1, 9) (mean 0.1).
    collapse_at: int | None = None
    # Canary: each request is served by one route, the candidate with probability 1/2.
    mode: RolloutMode = RolloutMode.SHADOW
    cancel_rate: float = 0.0
    # None: the same as `cancel_rate`.
    candidate_cancel_rate: float | None = None
    # A share of requests in a segment the policy does not declare (clients set it).
    undeclared_share: float = 0.0
    # Collapse only in this segment (`undeclared`: the undeclared one); None: everywhere.
    collapse_segment: str | None = None
    # Mean running requests of the baseline (0: no loads recorded); the candidate's share
    # of the traffic, and its primary gain at 1% and at 100% of the baseline's load.
    baseline_load: float = 0.0
    share: float = 1.0
    gain_at: tuple[float, float] | None = None
    # Sampled-output parity: the candidate's verifier (`exact`, `biased`); None: no parity
    # data. The pools: prompts x answers per variant, generated once per process.
    sampler: str | None = None
    pool: tuple[int, int, int] = (8, 150, 7)
    # Conversations / agent episodes: lengths (shortest, longest), their intra-episode
    # correlation of the latency log-ratios, and how many are open at once. None: every
    # pair independent (and no episode column).
    episode_len: tuple[int, int] | None = None
    episode_icc: float = 0.0
    concurrent: int = 40
    # With episodes: the intra-episode correlation of the evaluators' paired differences
    # (0: each pair's results drawn independently).
    eval_icc: float = 0.0
    # Canary with episodes: each episode served by one cohort as a whole (the gateway's
    # sticky assignment); False: a coin per request, as before issue 39.
    sticky: bool = True
    # Shadow with episodes: greedy mismatch (half the episodes greedy, a tenth the control
    # slice), thumbs-down (a fifth of answers rated) and acceptance, each alike within a
    # conversation at this intra-episode correlation (`_episode_rates`); None: none drawn.
    rates_icc: float | None = None


def draw_pairs(s: Scenario, policy: Policy, runs: int, rng: np.random.Generator) -> PairColumns:
    """Draw `runs` simulated rollouts of `s.pairs` pairs each."""
    shape = (runs, s.pairs)
    episode = None if s.episode_len is None else draw_episodes(s, runs, rng)
    seg = rng.integers(0, len(policy.segments), size=shape)
    if episode is not None:  # a conversation keeps its segment
        seg = np.take_along_axis(seg, episode % s.pairs, axis=-1)
    if s.undeclared_share:  # no draw otherwise: other scenarios keep their random streams
        seg = np.where(rng.random(shape) < s.undeclared_share, UNDECLARED_INDEX, seg)
    k = seg % TTFT_S.size

    def side_noise() -> FloatArray:
        return rng.normal(0.0, s.call_log_sd, size=(*shape, 2))

    ttft = TTFT_S[k][..., None] * np.exp(
        rng.normal(0, s.shared_log_sd, shape)[..., None] + side_noise()
    )
    ttft[..., 1] += s.tail_extra_s * (rng.random(shape) < s.tail_share)
    tpot = TPOT_S[k][..., None] * np.exp(
        rng.normal(0, s.shared_log_sd, shape)[..., None] + side_noise()
    )
    tpot[..., 1] *= s.tpot_ratio
    if episode is not None:
        _episode_effects(s, episode, (ttft, tpot), rng)
    load = None
    if s.baseline_load > 0:  # no draw otherwise: other scenarios keep their random streams
        load = np.stack(
            [rng.poisson(s.baseline_load, shape), rng.poisson(s.share * s.baseline_load, shape)],
            axis=-1,
        ).astype(np.float64)
        if s.gain_at is not None:
            tpot[..., 1] *= 1.0 - gain_at_load(s, load[..., 1] / s.baseline_load)
    tokens = TOKENS[k] * np.exp(rng.normal(0, s.shared_log_sd, shape))
    failed = rng.random((*shape, 2)) < s.error_rate
    e2e = ttft + tpot * tokens[..., None]
    for x in (ttft, tpot, e2e):
        x[failed] = np.nan
    mean_acc = ACCEPTANCE[k]
    acceptance = rng.beta(10 * mean_acc, 10 * (1 - mean_acc))
    if s.collapse_at is not None:
        tail = acceptance[:, s.collapse_at :]
        collapsed = rng.beta(1.0, 9.0, size=tail.shape)
        if s.collapse_segment is None:
            tail[...] = collapsed
        else:
            where = seg[:, s.collapse_at :] == _segment_index(policy, s.collapse_segment)
            tail[...] = np.where(where, collapsed, tail)
    evals = {f"eval{j}": _eval_scores(s, drop, shape, rng) for j, drop in enumerate(s.eval_drops)}
    if episode is not None and s.eval_icc:
        assert not any(s.eval_drops), "episode-correlated evaluators: A/A only"
        evals = {name: _eval_episodes(s, x, episode, rng) for name, x in evals.items()}
    unserved = np.zeros((*shape, 2), dtype=bool)
    if s.mode is RolloutMode.CANARY:
        # The unserved side never happened: no latency, no failure, no scores.
        coin = rng.random(shape) < 0.5
        if episode is not None and s.sticky:  # an episode is served by one cohort
            coin = np.take_along_axis(coin, episode % s.pairs, axis=-1)
        unserved = np.stack([coin] * 2, axis=-1)
        unserved[..., 1] = ~unserved[..., 0]
        for x in (ttft, tpot, e2e, *evals.values()):
            x[unserved] = np.nan
        failed &= ~unserved
        acceptance[unserved[..., 1]] = np.nan
    cancelled = _cancels(s, shape, unserved, rng)
    failed &= ~cancelled
    parity = None if s.sampler is None else _parity(s, shape, unserved | failed, rng)
    cols = PairColumns(
        segment=seg, created_s=np.broadcast_to(np.arange(s.pairs) / s.pairs_per_s, shape),
        is_control=np.zeros(shape, dtype=bool), dropped=np.any(cancelled, axis=-1),
        ttft=ttft, tpot=tpot, e2e=e2e, failed=failed, acceptance=acceptance, evals=evals,
        cancelled=cancelled, load=load, parity=parity, episode=episode,
    )  # fmt: skip
    if s.rates_icc is None:  # no draw otherwise: other scenarios keep their random streams
        return cols
    return _episode_rates(s, cols, mean_acc, rng)


def _alike(
    p: float | FloatArray,
    icc: float,
    concentration: float,
    episode: IntArray,
    rng: np.random.Generator,
) -> FloatArray:
    """Return each pair's rate, its episode's draw ~ Beta(p c, (1 - p) c) (mean p).

    c is set so that outcomes drawn at that rate (per-request Beta of this `concentration`,
    or 0/1 at inf) correlate within an episode at `icc`: 1 / (c + 1) for 0/1 outcomes,
    (k + 1) / (k + 1 + c) for Beta(m k, (1 - m) k) ones. At icc 0 every pair's rate is p.
    """
    base = np.broadcast_to(np.asarray(p, dtype=np.float64), episode.shape)
    if icc <= 0:
        return np.asarray(base, dtype=np.float64)
    c = (1.0 - icc) / icc * (concentration + 1.0 if np.isfinite(concentration) else 1.0)
    draw = rng.beta(c * base, c * (1.0 - base))
    # One draw per episode (p is alike within it: a conversation keeps its segment).
    per_episode = np.zeros((episode.shape[0], int(episode.max()) + 1))
    np.put_along_axis(per_episode, episode, draw, axis=-1)
    return np.asarray(np.take_along_axis(per_episode, episode, axis=-1), dtype=np.float64)


def _episode_rates(
    s: Scenario, cols: PairColumns, mean_acc: FloatArray, rng: np.random.Generator
) -> PairColumns:
    """Add greedy mismatch, thumbs-down and acceptance alike within conversations (A/A)."""
    episode = cols.episode
    assert episode is not None and s.rates_icc is not None and s.mode is RolloutMode.SHADOW
    assert s.collapse_at is None, "episode-correlated acceptance: no collapse"
    icc, n_ep = s.rates_icc, int(episode.max()) + 1

    def per_episode(p: float) -> BoolArray:
        coin = rng.random((episode.shape[0], n_ep)) < p
        return np.asarray(np.take_along_axis(coin, episode, axis=-1))

    control, greedy = per_episode(0.1), per_episode(0.5)
    mismatch = rng.random(episode.shape) < _alike(0.05, icc, np.inf, episode, rng)
    down = [rng.random(episode.shape) < _alike(0.1, icc, np.inf, episode, rng) for _ in "bc"]
    rated = rng.random((*episode.shape, 2)) < 0.2
    feedback = np.where(rated, np.stack(down, axis=-1).astype(np.float64), np.nan)
    level = _alike(mean_acc, icc, 10.0, episode, rng)
    acceptance = rng.beta(10 * level, 10 * (1 - level))
    return replace(
        cols, is_control=control, mismatch=np.where(greedy | control, mismatch, np.nan),
        feedback=feedback, acceptance=acceptance,
    )  # fmt: skip


def draw_episodes(s: Scenario, runs: int, rng: np.random.Generator) -> IntArray:
    """Return each pair's episode code, (runs, pairs): conversations interleaved in time.

    Codes count episodes in their start order within a run (0, 1, ...).
    """
    assert s.episode_len is not None
    short, long = s.episode_len
    mean_len = (short + long) / 2
    n_ep = int(np.ceil(1.3 * s.pairs / mean_len)) + 2 * s.concurrent
    lengths = rng.integers(short, long + 1, size=(runs, n_ep))
    starts = np.cumsum(rng.exponential(mean_len / s.concurrent, size=(runs, n_ep)), axis=-1)
    times = starts[..., None] + np.cumsum(rng.exponential(1.0, size=(runs, n_ep, long)), -1)
    times[np.arange(long) >= lengths[..., None]] = np.inf
    first = np.argsort(times.reshape(runs, -1), axis=-1, kind="stable")[:, : s.pairs]
    return np.asarray(first // long, dtype=np.int64)


def _episode_effects(
    s: Scenario, episode: IntArray, latencies: tuple[FloatArray, ...], rng: np.random.Generator
) -> None:
    """Scale latencies by each episode's shared and candidate-only random effects."""
    runs, n_ep = episode.shape[0], int(episode.max()) + 1
    icc = s.episode_icc
    # Each route's own effect: the log-ratio's episode variance is twice this, its pair
    # variance twice call_log_sd^2, so its intra-episode correlation is `icc`; both routes
    # keep one distribution (an A/A stays an A/A in every tail).
    sd = np.sqrt(icc / (1.0 - icc)) * s.call_log_sd
    for x in latencies:
        shared = rng.normal(0.0, s.shared_log_sd * np.sqrt(icc), (runs, n_ep, 1))
        own = rng.normal(0.0, sd, (runs, n_ep, 2))
        x *= np.exp(np.take_along_axis(shared + own, episode[..., None], axis=1))


def gain_at_load(s: Scenario, c: FloatArray | float) -> FloatArray:
    """Return the candidate's primary gain at load share `c` of the baseline's mean load."""
    assert s.gain_at is not None
    low, full = s.gain_at
    return np.asarray(low + (full - low) * (np.asarray(c) - 0.01) / 0.99, dtype=np.float64)


def _parity(
    s: Scenario, shape: tuple[int, int], missing: BoolArray, rng: np.random.Generator
) -> dict[str, FloatArray]:
    """Draw each pair's answer statistics from the real verifiers' pools (NaN: ineligible)."""
    from gate.engines.answer_pools import cached_pools
    from gate.parity import STATISTICS

    assert s.sampler is not None
    pools = cached_pools(*s.pool)
    prompts, answers = pools["natural"]["baseline"].shape
    p = rng.integers(0, prompts, shape)
    picks = [rng.integers(0, answers, shape) for _ in range(2)]
    variants = ("baseline", s.sampler)
    values = np.stack([pools["stats"][v][p, i] for v, i in zip(variants, picks, strict=True)], -2)
    natural = np.stack(
        [pools["natural"][v][p, i] for v, i in zip(variants, picks, strict=True)], -1
    )
    usable = natural & ~missing
    if s.mode is RolloutMode.SHADOW:
        usable = np.stack([usable.all(axis=-1)] * 2, axis=-1)  # the pair, or neither side
    out = {}
    for k, stat in enumerate(STATISTICS):
        # Complete log-probabilities on every answer; the text statistics are tested too.
        out[stat] = np.where(usable, values[..., k], np.nan)
    return out


def _segment_index(policy: Policy, name: str) -> int:
    return UNDECLARED_INDEX if name == UNDECLARED else policy.segments.index(name)


def _cancels(
    s: Scenario, shape: tuple[int, int], unserved: BoolArray, rng: np.random.Generator
) -> BoolArray:
    cand = s.cancel_rate if s.candidate_cancel_rate is None else s.candidate_cancel_rate
    # The shadow candidate is a mirror nobody waits on: it is never cancelled.
    rates = np.array([s.cancel_rate, cand if s.mode is RolloutMode.CANARY else 0.0])
    if not rates.any():  # no draw: scenarios without cancels keep their random streams
        return np.zeros((*shape, 2), dtype=bool)
    return np.asarray((rng.random((*shape, 2)) < rates) & ~unserved)


def _eval_episodes(
    s: Scenario, scores: FloatArray, episode: IntArray, rng: np.random.Generator
) -> FloatArray:
    """Redraw the discordant pairs by episode: a share `discordant / eval_icc` of episodes
    diverges, each pair of it discordant with probability `eval_icc`, all one way (a coin
    per episode). The discordant rate stays `discordant`, half each way; the paired
    difference's intra-episode correlation is `eval_icc`."""
    runs, n_ep = episode.shape[0], int(episode.max()) + 1
    rho = s.eval_icc
    diverges = rng.random((runs, n_ep)) < s.discordant / rho
    worse = rng.random((runs, n_ep)) < 0.5
    hit = np.take_along_axis(diverges, episode, axis=-1) & (rng.random(episode.shape) < rho)
    cand_worse = np.take_along_axis(worse, episode, axis=-1)
    out = scores.copy()
    concordant = out[..., 0] == out[..., 1]
    # Discordant pairs of the independent draw become concordant (both pass or both fail,
    # as the pass rate has them), then the episode's own discordance is laid over them.
    both_fail = rng.random(episode.shape) < (1 - s.pass_rate) / (1 - s.discordant)
    fill = np.where(concordant, out[..., 0], both_fail)
    out[..., 0] = np.where(hit, ~cand_worse, fill)
    out[..., 1] = np.where(hit, cand_worse, fill)
    return out


def _eval_scores(
    s: Scenario, drop: float, shape: tuple[int, int], rng: np.random.Generator
) -> FloatArray:
    # Cells: both pass, baseline-only pass, candidate-only pass, both fail.
    half = s.discordant / 2
    edges = np.cumsum([s.pass_rate - half - drop, half + drop, half])
    u = rng.random(shape)
    cell = np.searchsorted(edges, u, side="right")
    base_fail = (cell == 2) | (cell == 3)
    cand_fail = (cell == 1) | (cell == 3)
    return np.stack([base_fail, cand_fail], axis=-1).astype(np.float64)


def to_records(cols: PairColumns, policy: Policy, run: int = 0) -> list[dict[str, Any]]:
    """Return one simulated run as pair records in the replay JSONL schema."""
    start = 1_750_000_000.0
    out = []
    for i in range(cols.segment.shape[-1]):
        sides = [_side(cols, run, i, k) for k in (0, 1)]
        if cols.load is not None:
            for k, side in enumerate(sides):
                side["load"] = float(cols.load[run, i, k])
        rate = float(cols.acceptance[run, i])
        if np.isfinite(rate):  # NaN: a canary pair the candidate did not serve
            sides[1]["draft_tokens"] = 100
            sides[1]["accepted_tokens"] = round(100 * rate)
        if cols.mismatch is not None and np.isfinite(cols.mismatch[run, i]):
            # A greedy pair: the greedy-parity evaluator on its second side.
            greedy = policy.guardrails.greedy_mismatch.evaluator
            sides[1]["evals"][greedy] = bool(cols.mismatch[run, i] == 0)
        out.append(
            {
                "pair_id": f"{run}-{i}",
                "segment": _segment_name(policy, int(cols.segment[run, i])),
                "created_at": start + float(cols.created_s[run, i]),
                "is_control": bool(cols.is_control[run, i]),
                "episode": None if cols.episode is None else f"{run}-{cols.episode[run, i]}",
                "baseline": sides[0],
                "candidate": sides[1],
            }
        )
    return out


def _segment_name(policy: Policy, index: int) -> str:
    return policy.segments[index] if 0 <= index < len(policy.segments) else UNDECLARED_NAME


def _side(cols: PairColumns, run: int, i: int, k: int) -> dict[str, Any]:
    failed = bool(cols.failed[run, i, k])
    cancelled = cols.cancelled is not None and bool(cols.cancelled[run, i, k])
    status = "cancelled" if cancelled else "error" if failed else "ok"

    def value(x: FloatArray) -> float | None:
        v = float(x[run, i, k])
        return None if np.isnan(v) else v

    return {
        "ttft_s": value(cols.ttft),
        "tpot_s": value(cols.tpot),
        "e2e_s": value(cols.e2e),
        "status": status,
        "evals": {name: bool(v[run, i, k] == 0) for name, v in cols.evals.items()},
        "draft_tokens": 0,
        "accepted_tokens": 0,
    }
