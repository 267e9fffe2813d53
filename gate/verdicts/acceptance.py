"""What an arm's verdict shows beyond its gate, folded (Postgres; issue 40): its first pair,
and what each slice adds to its acceptance length, in SQL.

The acceptance length compares arms across draft lengths (`gate.stats.acceptance_length`);
the arms' verdict shows it per arm. Its sums are additive, so the fold keeps them per arm
(`gate_folds.arm_sums`) with their own watermark and adds each new slice, as
`gate.stats.arms_replay.acceptance_of` sums the arm's pair records: every pair of the arm
but the control pairs and those dropped at their deadline (a dropped pair's candidate may
land after it was folded, a span replayed from the spool: replay would read it); a request
counts where its passes are known (emitted > accepted >= 0), and its loop signature where
both answers' distinct-2 are known.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from gate.stats.acceptance_length import LOOP_DISTINCT, LOOP_SHARE, AcceptanceSums
from gate.stats.incremental import Key
from gate.stats.policy import Policy
from gate.verdicts.slices import SLICE_PAIRS, Slice, calls_since, first_keys

# As the export writes a side (`gate.pairs.export`): a missing draft count is 0.
_SUMS = f"""
WITH p AS (
  {SLICE_PAIRS}
), s AS (
  SELECT CAST(c.output_tokens AS float8) AS o,
         CAST(coalesce(c.spec_accepted_tokens, 0) AS float8) AS a,
         CAST(coalesce(c.spec_draft_tokens, 0) AS float8) AS d,
         c.distinct_2 AS c2, b.distinct_2 AS b2
  FROM p
  JOIN generations c ON c.pair_id = p.id AND c.cohort = 'candidate' AND {calls_since("c")}
  LEFT JOIN generations b ON b.pair_id = p.id AND b.cohort = 'baseline' AND {calls_since("b")}
  WHERE NOT p.is_control AND p.state <> 'dropped'
), k AS (
  SELECT s.*, coalesce(o > a AND a >= 0, false) AS known FROM s
), l AS (
  SELECT k.*, known AND c2 IS NOT NULL AND b2 IS NOT NULL AS compared,
         coalesce(known AND d > 0 AND o >= :share * (d + (o - a)) AND c2 < :distinct * b2,
                  false) AS looping
  FROM k
)
SELECT coalesce(sum(o) FILTER (WHERE known), 0), coalesce(sum(o - a) FILTER (WHERE known), 0),
       count(*) FILTER (WHERE known), count(*) FILTER (WHERE looping AND compared),
       count(*) FILTER (WHERE compared)
FROM l
"""


def added(session: Session, piece: Slice, policy: Policy) -> AcceptanceSums:
    """Return the acceptance sums of the slice's pairs (control pairs aside)."""
    params = {**piece.params(policy), "share": LOOP_SHARE, "distinct": LOOP_DISTINCT}
    output, passes, requests, looping, compared = session.execute(text(_SUMS), params).one()
    return AcceptanceSums(float(output), float(passes), requests, looping, compared)


@dataclass(frozen=True)
class ArmSums:
    """What an arm's verdict shows beyond its gate, folded up to `upto`: its first pair in
    fold order (arms are listed in the order of their first pairs, as replay lists them)
    and its acceptance-length sums."""

    first: Key | None = None
    upto: Key | None = None
    acceptance: AcceptanceSums = field(default_factory=AcceptanceSums)


def advance(
    session: Session, stored: dict[str, Any] | None, piece: Slice, policy: Policy
) -> tuple[ArmSums, dict[str, Any] | None]:
    """Return the arm's sums up to `piece.upto` from those stored, and what to store.

    `piece.after` is ignored: the stored sums carry their own watermark (`upto`); a stored
    watermark past `piece.upto` (the fold started over) starts the sums over too."""
    sums = load(stored)
    if sums.upto is not None and sums.upto > piece.upto:
        sums = ArmSums()
    if sums.upto == piece.upto:
        return sums, stored
    first = sums.first or _first(session, piece, policy)
    more = added(session, replace(piece, after=sums.upto), policy)
    sums = ArmSums(first, piece.upto, sums.acceptance.plus(more))
    return sums, dump(sums)


def _first(session: Session, piece: Slice, policy: Policy) -> Key | None:
    keys = first_keys(session, replace(piece, after=None), policy, 1)
    return keys[0] if keys else None


def load(stored: dict[str, Any] | None) -> ArmSums:
    """Return the stored sums (none: empty)."""
    if not stored:
        return ArmSums()
    return ArmSums(
        _key(stored["first"]), _key(stored["upto"]), AcceptanceSums(**stored["acceptance"])
    )


def dump(sums: ArmSums) -> dict[str, Any]:
    """Return the sums as JSON."""
    return {
        "first": _json(sums.first),
        "upto": _json(sums.upto),
        "acceptance": asdict(sums.acceptance),
    }


def _key(value: list[str] | None) -> Key | None:
    return None if value is None else (datetime.fromisoformat(value[0]), uuid.UUID(value[1]))


def _json(key: Key | None) -> list[str] | None:
    return None if key is None else [key[0].isoformat(), str(key[1])]
