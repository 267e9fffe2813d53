"""Backtest recorded pairs: the JSONL pair schema and `replay`.

One JSON object per line, one line per pair, in fold order (below):

    {"pair_id": "7f9c...", "segment": "chat", "episode": "conv-81",
     "created_at": "2025-05-01T12:00:00Z",
     "evaluated_at": "2025-05-01T12:00:09.512Z", "is_control": false,
     "baseline":  {"ttft_s": 0.21, "tpot_s": 0.019, "e2e_s": 4.1, "status": "ok",
                   "evals": {"task": true}, "draft_tokens": 0, "accepted_tokens": 0},
     "candidate": {"ttft_s": 0.22, "tpot_s": 0.014, "e2e_s": 3.2, "status": "ok",
                   "evals": {"task": true, "greedy_parity": true},
                   "draft_tokens": 120, "accepted_tokens": 87, "feedback": null}}

* `pair_id`: the pair's id (carried for tracing; replay does not need it).
* `created_at` (required): ISO 8601 time or epoch seconds; a stage's duration runs from
  its earliest to its latest pair.
* `evaluated_at` (optional): when the pair's evaluations landed (or it was dropped). Pairs
  are replayed in fold order, the order in which the gate folds them: pairs with
  `evaluated_at` by (evaluated_at, pair_id), then the others by `created_at`; lines out
  of that order are sorted into place. The warm-up is the first pairs in this order.
* `segment`: the declared segment; segments the policy does not declare count only in
  the pooled `all` cells.
* `episode` (optional): the string that names the pair's episode, the conversation or agent
  run its request belongs to (`gate.request.episodes`; stored in `pairs.episode`). Pairs
  with equal strings are one episode; null or absent: the pair is its own episode. Any
  other value is a malformed record. With episodes, the means' intervals (latency
  log-ratios, parity, canary log-means, load bands), the paired rates (failures,
  evaluators, tails), the canary cohort rates and the two proportions (greedy mismatch,
  shadow feedback) take the episode as the unit (`gate.stats.sequences`: `EpisodeMean`,
  `EpisodeCounts`, `EpisodeCohorts`, `EpisodeTwoCounts`), and the collapse detectors read
  each episode's first pair; without any, every pair is its own and the verdicts are
  those of independent pairs.
* `episode_continues` (optional): true when the pair's episode has a pair in an earlier
  stage of the rollout (the export writes it): no pair of it opens its episode here, so
  the collapse detectors read none of it. False, null or absent: the episode may begin here.
* `arm` (optional): the string that names the candidate configuration (route) the pair's
  candidate call used, in a rollout with several (issue 40; stored in `pairs.arm`). A file
  where no record names one is the single-arm case, judged as before; where some do, every
  record must (null or absent there is a malformed record), each arm's pairs are judged as
  their own stream and the best arm is chosen (`gate.stats.arms_replay`, shadow mode).
* `dropped` (optional): true when the pair was dropped at its deadline (the export writes
  it from the pair's state): never judged, even where a side landed afterwards (a span
  replayed from the collector's spool), as the fold reads it. False, null or absent: the
  sides decide (below).
* `is_control`: a baseline-vs-baseline pair; `candidate` is then the second baseline call.
  Control pairs feed only the greedy-mismatch control rate.
* side `status`: ok | error | timeout | fallback | dropped | cancelled, read through the
  one outcome definition (`GenerationStatus.outcome`): a route failure (error, timeout,
  fallback) fails every evaluator; a side not attributable to its route (dropped,
  cancelled) or, in shadow mode, a missing one drops the pair. In canary mode a cancelled
  side still counts in its cohort's cancel rate (`guardrails.cancels`).
* side `evals`: evaluator name -> passed; null (not evaluable) counts as neither. The
  greedy-parity evaluator (policy `guardrails.greedy_mismatch.evaluator`) on the second
  side marks a greedy pair's match.
* `draft_tokens` / `accepted_tokens`: the candidate's speculative counts; the request's
  acceptance rate is their ratio (the request is the unit, not the token).
* side `load` (optional): the route's running requests at the pair's start (the engine's
  gauge, else the gateway replicas' in-flight counts; `gate.pairs.load`). The load
  bands (`guardrails.load_bands`) read the pairs whose two sides both carry one.
* `feedback`: 1 thumbs-up, 0 neutral, -1 thumbs-down, null none (served responses only).
* sampled-output parity (optional; a file without `temperature` on any side has no parity
  cells): side `temperature`, `top_p`, `max_tokens`, `seed`, `finish_reason`,
  `output_tokens`, `logprob_tokens` / `logprob_sum` (the emitted tokens' log-probability
  count and sum, null when not asked) and `distinct_2` (distinct word bigrams / bigrams
  of the answer). A pair enters only when `gate.parity.eligibility` admits it (sampled,
  same settings, no shared seed, both sides ended naturally); mean log-prob only when
  both sides' counts cover every output token.
* per-token exactness (optional): side `exactness`, the call's sums as
  `gate.exactness.TokenFit.as_dict` writes them, `{"n": tested tokens, "cut": tokens the
  request's settings make impossible, "skipped": positions not tested, "bins": [20
  fractional shares of the probability-integral-transform bins, summing to n], "off":
  tested tokens that were not their position's most likely outcome, "off_p": the sum of
  their chances not to be, "off_p2": the sum of those chances' squares (all three
  optional, 0 when absent: without the first two the most-likely test reads nothing of
  the call, without the third it bounds the variance less tightly)}`, or null
  when the call carried no `top_logprobs`. `gate.exactness.exactness_fields` computes it
  from any call's OpenAI-format `logprobs` object, its sampling settings and the number
  of alternatives it asked for (`top_logprobs=`), so calls
  recorded by any tool can be replayed. The candidate's sides are tested; the baseline's
  are the control (a data-quality alarm).
* canary mode: each pair has one side (the cohort that served it), the other is null.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson

from gate.db.enums import Decision, RolloutMode
from gate.errors import BadRequest, InputMalformed, InputMissing
from gate.stats.cumulative import at_look, looks_every, to_stats
from gate.stats.policy import Policy, at_stage, next_stage_share
from gate.stats.record_columns import Record, columns, fold_order
from gate.stats.rule import Code, apply_rule
from gate.stats.verdict import DECISIONS, VerdictResult, decide


@dataclass(frozen=True)
class ReplayResult:
    """The first decisive verdict of a replay (or the last look's, if none was)."""

    decision: Decision
    pairs: int
    decisive: bool
    looks: int
    total_pairs: int
    verdict: VerdictResult


class Stopped(Protocol):
    """Where a replay stopped: what a single-arm and a multi-arm replay both report."""

    @property
    def decision(self) -> Decision: ...
    @property
    def pairs(self) -> int: ...
    @property
    def decisive(self) -> bool: ...
    @property
    def looks(self) -> int: ...
    @property
    def total_pairs(self) -> int: ...


def look_fields(result: Stopped) -> dict[str, Any]:
    """Return where a replay stopped: its decision, pairs, whether decisive, looks, total."""
    return {
        "decision": result.decision.value,
        "pairs": result.pairs,
        "decisive": result.decisive,
        "looks": result.looks,
        "total_pairs": result.total_pairs,
    }


def read_pairs(path: Path) -> list[Record]:
    """Parse a pair JSONL file into records; a malformed line is `InputMalformed`."""
    records = []
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputMissing(f"cannot read pairs {path}: {exc.strerror}") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    records.append(orjson.loads(line))
                except orjson.JSONDecodeError as exc:
                    raise InputMalformed(f"{path}:{number}: not JSON: {exc}") from None
    return records


def replay(
    pairs: Iterable[Record],
    policy: Policy,
    *,
    every: int = 100,
    mode: RolloutMode = RolloutMode.SHADOW,
    candidate_share: float = 0.5,
    stage: int = 0,
    load_match: float | None = None,
) -> ReplayResult:
    """Replay pairs in order, looking every `every` pairs; stop at the first decision.

    The pairs are one stage's, `stage` (0-based), which spends its share of alpha_kill;
    the load bands compare with the share promotion brings (`next_stage_share`).
    `load_match`: judge only load-matched pairs (`policy.load_tolerance`; None: all).
    """
    next_share = next_stage_share(policy, stage, mode)
    policy = at_stage(policy, stage)
    records = fold_order(list(pairs))
    if not records:
        raise BadRequest("no pairs to replay")
    cols = columns(records, policy, mode)
    looks = looks_every(len(records), every)
    stats = to_stats(
        cols,
        policy,
        looks,
        mode=mode,
        candidate_share=candidate_share,
        next_share=next_share,
        load_match=load_match,
    )
    ev = apply_rule(policy, stats)
    decisive = np.flatnonzero(ev.code != Code.CONTINUE)
    at = int(decisive[0]) if decisive.size else looks.size - 1
    verdict = decide(policy, at_look(stats, at))
    return ReplayResult(
        decision=DECISIONS[Code(int(ev.code[at]))],
        pairs=int(looks[at]),
        decisive=bool(decisive.size),
        looks=int(at + 1),
        total_pairs=len(records),
        verdict=verdict,
    )
