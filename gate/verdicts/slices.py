"""A slice of a stage's pairs: its keys and the rows the fold's SQL reads (Postgres, shadow).

A slice is the stage's closed pairs after one key and up to another in fold order
(`evaluated_at`, `id`), each joined to its baseline generation and to its second one
(cohort `candidate`, or `control` for baseline-vs-baseline pairs) and to their
evaluations. `gate.verdicts.folds` folds each new slice into the stored state
(`gate.stats.incremental`, pure); every query reads only the slice, through the index on
(rollout_id, stage, evaluated_at, id). Assumptions: one generation per cohort per pair; an
evaluator with several results (versions) for one generation passes only if all of them
passed. Sampled-output parity reads each pair's differences, stored when it was stamped
(`gate.pairs.parity`), so eligibility is judged once, in Python (`gate.parity`). The load
bands read each pair's loads, likewise stored when it was stamped (`gate.pairs.load`), and
so does the selection of a promoted rollout routed by load: only load-matched pairs are
`live` (`_MATCHED`, as `gate.stats.columns.load_matched`), the others are `unmatched`.
Every query starts from `SLICE`, one row per pair; `gate.verdicts.warmup` reads what the
warm-up fixes and `gate.verdicts.aggregates` the slice's sums, the gate's statistics.
Not here: canary mode (unpaired cohorts). User feedback is folded by rating on its own
(`rated_slice`, `gate.verdicts.feedback`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from gate.db.enums import Outcome, sql_statuses
from gate.db.models import Pair
from gate.stats.acceptance_length import LOOP_DISTINCT, LOOP_SHARE
from gate.stats.incremental import POOLED_ONLY, Key
from gate.stats.policy import Policy
from gate.stats.sequences import LOG_RATIO_CLIP

# Below every real key: the lower end of the first slice, the warm-up end of none.
_NO_KEY: Key = (datetime(1970, 1, 1, tzinfo=UTC), uuid.UUID(int=0))


@dataclass(frozen=True)
class Slice:
    """The pairs of one stage after `after` up to `upto`; those up to `warm_upto` are warm."""

    rollout_id: int
    stage: int
    after: Key | None
    upto: Key
    warm_upto: Key | None = None
    # Judge only load-matched pairs within this gap (`policy.load_tolerance`; None: all).
    load_match: float | None = None
    # One arm's pairs: its own and the control pairs (`gate.stats.arms.member`; None: all).
    arm: str | None = None
    # No pair of the stage was created before this (`stage_since`): bounds every read by
    # time, so a partitioned `pairs` reads only the stage window's partitions.
    since: datetime = _NO_KEY[0]
    # No pair of the rollout was created before this (`rollout_since`): bounds the look at
    # the earlier stages' pairs, which decides the episodes that began there (`opens`).
    opened_since: datetime = _NO_KEY[0]

    def params(self, policy: Policy) -> dict[str, Any]:
        """Return the bind parameters every slice query takes."""
        (after_at, after_id), (warm_at, warm_id) = self.after or _NO_KEY, self.warm_upto or _NO_KEY
        return {
            "rollout": self.rollout_id,
            "stage": self.stage,
            "after_at": after_at,
            "after_id": after_id,
            "upto_at": self.upto[0],
            "upto_id": self.upto[1],
            "warm_at": warm_at,
            "warm_id": warm_id,
            "segments": list(policy.segments),
            "pooled_only": POOLED_ONLY,
            "clip": LOG_RATIO_CLIP,
            "greedy": policy.guardrails.greedy_mismatch.evaluator,
            "load_match": self.load_match,
            "arm": self.arm,
            "since": self.since,
            "earlier": list(range(self.stage)),
            "opened_since": self.opened_since,
        }


# The one outcome definition (`gate.db.enums`): a side no route is answerable for drops
# the pair (the data-quality line); a route failure fails every metric of its side.
_UNATTRIBUTABLE = sql_statuses(Outcome.NOT_ATTRIBUTABLE)
_ROUTE_FAILURE = sql_statuses(Outcome.ROUTE_FAILURE)


def _exact(side: str) -> str:
    # A side's exactness sums (`gate.exactness_fit.TokenFit`); a JSON null is none.
    column = f"{side}.exactness"
    return f"CASE WHEN jsonb_typeof({column}) = 'object' THEN {column} END AS {side}_exact"


# Load-matched (`gate.stats.columns.load_matched`): without a tolerance every pair; with
# one, both loads known and at most that apart (a NULL load compares to NULL: not matched).
_MATCHED = (
    "(CAST(:load_match AS float8) IS NULL"
    " OR coalesce(abs(candidate_load - baseline_load) <= CAST(:load_match AS float8), false))"
)
# The candidate's repetition-loop signature (`gate.stats.acceptance_length.loop_outcome`)
# and the baseline's side (`baseline_collapse`: its distinct-2 collapsed against the
# candidate's): NULL where not readable (no drafts, inconsistent counts, a distinct-2
# unknown or NaN).
_ACCEPTED, _DRAFTED = "coalesce(c.spec_accepted_tokens, 0)", "coalesce(c.spec_draft_tokens, 0)"
_READABLE = f"""NOT p.is_control AND c.output_tokens > {_ACCEPTED} AND {_ACCEPTED} >= 0
           AND {_DRAFTED} > 0 AND c.distinct_2 < 'Infinity' AND b.distinct_2 < 'Infinity'
           AND c.distinct_2 > '-Infinity' AND b.distinct_2 > '-Infinity'"""
_LOOP = f"""CASE WHEN {_READABLE} THEN
           CAST(c.output_tokens AS float8) >= CAST({LOOP_SHARE!r} AS float8)
             * CAST({_DRAFTED} + c.output_tokens - {_ACCEPTED} AS float8)
           AND c.distinct_2 < CAST({LOOP_DISTINCT!r} AS float8) * b.distinct_2 END AS c_loop,
         CASE WHEN {_READABLE} THEN
           b.distinct_2 < CAST({LOOP_DISTINCT!r} AS float8) * c.distinct_2 END AS b_loop"""
# An arm's pairs (`gate.stats.arms.member`, the one definition): its own and those that name
# no arm (the control pairs, in every arm's stream); without an arm, every pair.
_MEMBER = "(CAST(:arm AS text) IS NULL OR arm IS NULL OR arm = CAST(:arm AS text))"
# The stage's pairs of every arm, and (`_STAGE`) of the judged arm's stream.
_STAGE_ANY_ARM = "rollout_id = :rollout AND stage = :stage AND created_at >= :since"
_STAGE = f"{_STAGE_ANY_ARM} AND {_MEMBER}"
_RANGE = (
    "(evaluated_at, id) > (:after_at, :after_id) AND (evaluated_at, id) <= (:upto_at, :upto_id)"
)
_CLOSED = f"{_STAGE} AND state IN ('complete', 'dropped')"
# An episode's pairs in the rollout's earlier stages (`:earlier`, any state: each was created
# before this stage began, so the answer never changes), bounded by the rollout's first pair
# (`:opened_since`); one probe of the (rollout_id, stage, episode) index per earlier stage.
_EARLIER_STAGES = """FROM pairs e WHERE e.rollout_id = :rollout
             AND e.stage = ANY(CAST(:earlier AS int[])) AND e.created_at >= :opened_since"""
# Any arm's closed pairs of the stage: an episode moves between arms when the arm set
# changes (`gate.gateway.sampling.choose_arm`), so its first pair may be in another arm.
_CLOSED_ANY_ARM = f"{_STAGE_ANY_ARM} AND state IN ('complete', 'dropped')"
# `opens`: the pair is its episode's first in the whole rollout: no pair of it in an earlier
# stage, no earlier closed pair of it in this one in any arm (inside that subquery the
# unqualified columns of `_CLOSED_ANY_ARM` are q's); the collapse detectors read only those
# (`gate.stats.change`; replay: `gate.stats.arms.arm_rows`).
_PAIR_COLUMNS = """id, is_control, state, created_at, evaluated_at, parity, baseline_load,
         candidate_load, episode, (evaluated_at, id) <= (:after_at, :after_id) AS old,
         CASE WHEN segment = ANY(CAST(:segments AS text[])) THEN segment
              ELSE :pooled_only END AS seg,
         (evaluated_at, id) <= (:warm_at, :warm_id) AS warm"""
_PAIR = f"""{_PAIR_COLUMNS},
         (episode IS NULL OR NOT EXISTS (
           SELECT 1 FROM pairs q WHERE {_CLOSED_ANY_ARM} AND q.episode = pairs.episode
             AND (q.evaluated_at, q.id) < (pairs.evaluated_at, pairs.id))
           AND NOT EXISTS (SELECT 1 {_EARLIER_STAGES} AND e.episode = pairs.episode)) AS opens"""
# The slice's pairs, and (`EPISODE_SLICE`) the earlier pairs of the episodes they name:
# `old` marks those, so the fold can add what the slice changes in each episode's sums.
_SLICE_PAIRS = f"SELECT {_PAIR} FROM pairs WHERE {_CLOSED} AND {_RANGE}"
_EARLIER_OF_EPISODES = f"""SELECT {_PAIR} FROM pairs
  WHERE {_CLOSED} AND (evaluated_at, id) <= (:after_at, :after_id) AND episode IN (
    SELECT episode FROM pairs WHERE {_CLOSED} AND {_RANGE} AND episode IS NOT NULL)"""


def calls_since(alias: str) -> str:
    """Return the bound on a pair's generations (`alias`) by the stage's `since`: a call
    starts after its pair, so a partitioned `generations` is read from the stage's start."""
    return f"{alias}.started_at >= :since"


def evaluations_since(alias: str) -> str:
    """Return the bound on the evaluations (`alias`) of a pair's generations: each carries
    its generation's start, so a partitioned `evaluations` is read from the stage's start."""
    return f"{alias}.generation_started_at >= :since"


def _slice(pairs: str) -> str:
    return _ROWS.replace("{pairs}", pairs)


_ROWS = f"""
WITH p AS (
  {{pairs}}
), x AS (
  SELECT p.id, p.seg, p.is_control, p.created_at, p.evaluated_at, p.warm, p.parity,
         p.baseline_load, p.candidate_load, p.episode, p.old, p.opens,
         (p.state = 'dropped' OR b.id IS NULL OR c.id IS NULL
          OR b.status IN ({_UNATTRIBUTABLE}) OR c.status IN ({_UNATTRIBUTABLE})) AS dropped,
         b.id AS b_id, c.id AS c_id,
         b.status IN ({_ROUTE_FAILURE}) AS b_failed,
         c.status IN ({_ROUTE_FAILURE}) AS c_failed,
         b.ttft_s AS b_ttft, c.ttft_s AS c_ttft, b.tpot_s AS b_tpot, c.tpot_s AS c_tpot,
         b.e2e_s AS b_e2e, c.e2e_s AS c_e2e, {_exact("b")}, {_exact("c")},
         CASE WHEN NOT p.is_control AND c.spec_draft_tokens > 0 THEN
           least(coalesce(c.spec_accepted_tokens, 0)::float / c.spec_draft_tokens, 1.0) END AS acc,
         {_LOOP}
  FROM p
  LEFT JOIN generations b ON b.pair_id = p.id AND b.cohort = 'baseline' AND {calls_since("b")}
  LEFT JOIN generations c ON c.pair_id = p.id AND c.cohort IN ('candidate', 'control')
    AND {calls_since("c")}
), j AS (
  SELECT x.*, NOT warm AND NOT dropped AND NOT is_control AS judged, {_MATCHED} AS matched FROM x
), y AS (
  SELECT j.*, judged AND matched AS live, judged AND NOT matched AS unmatched,
         NOT b_failed AND NOT c_failed AS both_ok FROM j
)
"""
SLICE = _slice(_SLICE_PAIRS)
# The slice's pairs alone, one row each (columns of `pairs` and the fold's flags).
SLICE_PAIRS = _SLICE_PAIRS
EPISODE_SLICE = _slice(f"{_SLICE_PAIRS}\n  UNION ALL {_EARLIER_OF_EPISODES}")


def rated_slice(late: str) -> str:
    """Return the slice's rows (`gate.verdicts.feedback`) of its pairs (after `after`, up to
    `upto`) and of the pairs up to `after` that `late` names (one `pair_id` column: those
    with a rating made since the last look); `old` marks the latter.
    `opens` is only the collapse detectors' (NULL here: the ratings' read has no use for it)."""
    return _slice(f"""SELECT {_PAIR_COLUMNS}, CAST(NULL AS boolean) AS opens FROM pairs
  WHERE {_CLOSED} AND {_RANGE}
  UNION ALL SELECT {_PAIR_COLUMNS}, CAST(NULL AS boolean) AS opens FROM ({late}) AS rated
  JOIN pairs ON pairs.id = rated.pair_id
  WHERE {_CLOSED} AND (evaluated_at, id) <= (:after_at, :after_id)""")


_LAST = f"""SELECT evaluated_at, id FROM pairs WHERE {_STAGE} AND evaluated_at <= :horizon
ORDER BY evaluated_at DESC, id DESC LIMIT 1"""
_NEXT = f"""SELECT evaluated_at, id FROM pairs
WHERE {_STAGE} AND state IN ('complete', 'dropped') AND {_RANGE}
ORDER BY evaluated_at, id LIMIT :limit"""


_SINCE = "SELECT min(created_at) FROM pairs WHERE rollout_id = :rollout AND stage = :stage"
# A pair's span landing after its stub moves `created_at` back to the pair's start, seconds
# before its calls' spans (`collectors.normalise`): the bound leaves room for that.
SINCE_SLACK = timedelta(hours=1)


def pair_calls_since(created: Iterable[datetime]) -> datetime:
    """Return a time no call or request of pairs created at `created` started before (the
    first less `SINCE_SLACK`), so a partitioned `generations` or `requests` is read from it."""
    return min(created) - SINCE_SLACK


def stage_since(session: Session, *, rollout_id: int, stage: int) -> datetime:
    """Return a time no pair of the stage was created before: its first pair's creation
    less `SINCE_SLACK` (the epoch: no pair yet).

    One probe of the index on (rollout_id, stage, created_at) per partition. Read after
    the fold's horizon, it covers every pair stamped up to it (`gate.pairs.watermark`)."""
    found = session.execute(text(_SINCE), {"rollout": rollout_id, "stage": stage}).scalar()
    return found - SINCE_SLACK if isinstance(found, datetime) else _NO_KEY[0]


def rollout_since(session: Session, *, rollout_id: int) -> datetime:
    """Return a time no pair of the rollout was created before: its first stage's
    `stage_since` (the epoch where stage 0 has no pair: then unbounded). A conversation
    older than the rollout has no pair in it, so the look at earlier stages stops there."""
    return stage_since(session, rollout_id=rollout_id, stage=0)


def episodes_before(
    session: Session, *, rollout_id: int, stage: int, episodes: list[str], since: datetime
) -> set[str]:
    """Return which of `episodes` have a pair in a stage of the rollout before `stage`
    (`since`: `rollout_since`); as `opens` decides for the fold. Portable SQL: the export
    runs on SQLite too (the replay path's records)."""
    if not stage or not episodes:
        return set()
    found = session.scalars(
        select(Pair.episode)
        .distinct()
        .where(
            Pair.rollout_id == rollout_id,
            Pair.stage.in_(list(range(stage))),
            Pair.created_at >= since,
            Pair.episode.in_(episodes),
        )
    )
    return {episode for episode in found if episode is not None}


def last_key(
    session: Session,
    *,
    rollout_id: int,
    stage: int,
    horizon: datetime,
    arm: str | None = None,
    since: datetime = _NO_KEY[0],
) -> Key | None:
    """Return the last pair (of `arm`'s; None: any) stamped at or before `horizon`, in fold
    order."""
    params = {"rollout": rollout_id, "stage": stage, "horizon": horizon, "arm": arm, "since": since}
    row = session.execute(text(_LAST), params).first()
    return None if row is None else (row[0], row[1])


def first_keys(session: Session, piece: Slice, policy: Policy, limit: int) -> list[Key]:
    """Return the first `limit` keys of the slice, in fold order."""
    params = {**piece.params(policy), "limit": limit}
    return [(at, pair_id) for at, pair_id in session.execute(text(_NEXT), params)]


def difference(stat: str) -> str:
    """Return the SQL of a parity statistic's stored difference d, per pair."""
    # A statistic's stored d (`Pair.parity`); NULL where the pair may not compare it.
    assert stat.isidentifier(), stat
    return f"CAST(parity ->> '{stat}' AS float)"
