"""The shadow thumbs-down cell's sums for the live gate, folded by rating (issue 39, issue 6).

Ratings arrive after their pair is folded (usually, not always), so they are folded on
their own: each (rollout, stage, arm) state keeps the last pair and the last rating id
whose ratings it has read (`gate_folds.ratings`), each segment's sums (pooled too), and
each episode's running S_e and n_e per side and cell (`gate_rated_episodes`): an
episode's sums of squares are not additive over ratings, so a new rating of an episode
needs what it held. A look reads only what is new (`_ADVANCE`, one statement):

- the pairs folded since (after `upto`, up to the fold's watermark), each with its
  answers' first ratings so far (up to the last rating id now): a rating made before its
  pair was folded counts when the pair is;
- the pairs folded before that hold a rating made since (`rated_upto`, by rating id),
  whose answer had none before: a late rating of a folded pair.

Each pair is judged as the fold judged it: live, warm-up end, load tolerance, arm. The
per-episode rows are upserted and the statement returns what each cell's sums changed
by, which is added to the stored sums. So a look costs the new pairs and the new
ratings, not the stage's rated pairs.

An answer's outcome is its FIRST rating with thumbs (by rating id, as the export writes
it); a later rating of the same answer changes nothing. The cell's bets multiply one
factor per rated answer (`gate.stats.betting`), and Ville's bound holds for factors that,
once read, stay: a factor replaced between looks (a rating changed from up to down) is no
step of a supermartingale. That is also what makes folding by rating id valid: a
first rating, once read, never changes. Conditioned on: a rating's arrival (when, and
whether, an answer is rated) independent of the candidate's effect.

Rating ids are given at insert, not at commit: `gate.feedback.service.record` holds the
rollout's stamping lock shared (`gate.pairs.watermark`) and the look holds it exclusive,
so every rating of the rollout with an id up to the one read here is committed, and every
later one gets a larger id.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, text
from sqlalchemy.orm import Session

from gate.db.models import Feedback, RatedEpisode
from gate.db.models.quality import NO_ARM
from gate.stats.episode_sums import EpisodeSums, SidesSums
from gate.stats.ids import ALL
from gate.stats.incremental import Key
from gate.stats.policy import Policy
from gate.stats.sequences import CountStats, TwoCounts
from gate.verdicts.slices import Slice, calls_since, rated_slice

# An answer's first rating with thumbs up to the last rating id read: its id and 0/1 down.
_FIRST = """LEFT JOIN LATERAL (
    SELECT f.id, CASE WHEN f.thumbs < 0 THEN 1 ELSE 0 END AS down FROM feedback f
    WHERE f.generation_id = y.{side}_id AND f.thumbs IS NOT NULL AND f.id <= :rated_upto
    ORDER BY f.id LIMIT 1) AS f{side} ON true"""
# The pairs folded before (`old`) count only an answer whose first rating is new.
_NEW = "CASE WHEN NOT y.old OR f{side}.id > :rated_after THEN f{side}.down END"
# The pairs folded before that hold a rating made since the last look (by rating id).
_LATE = f"""SELECT DISTINCT g.pair_id FROM feedback f JOIN generations g ON g.id = f.generation_id
    WHERE f.id > :rated_after AND f.id <= :rated_upto AND f.thumbs IS NOT NULL
      AND {calls_since("g")} AND g.rollout_id = :rollout"""
_ADVANCE = f"""{rated_slice(_LATE)}, r AS (
  SELECT y.seg, coalesce(y.episode, CAST(y.id AS text)) AS ep,
         {_NEW.format(side="b")} AS b_down, {_NEW.format(side="c")} AS c_down
  FROM y {_FIRST.format(side="b")} {_FIRST.format(side="c")}
  WHERE y.live
), d AS (
  SELECT CASE WHEN GROUPING(seg) = 1 THEN :pooled_only ELSE seg END AS seg, ep,
         count(b_down) AS nb, coalesce(sum(b_down), 0) AS sb,
         count(c_down) AS nc, coalesce(sum(c_down), 0) AS sc
  FROM r GROUP BY GROUPING SETS ((seg, ep), (ep))
  -- Undeclared segments count in the pooled cell only.
  HAVING (count(b_down) > 0 OR count(c_down) > 0)
     AND (GROUPING(seg) = 1 OR seg <> :pooled_only)
), u AS (
  INSERT INTO gate_rated_episodes AS t (rollout_id, stage, arm, segment, episode, nb, sb, nc, sc)
  SELECT :rollout, :stage, :arm_key, seg, ep, nb, sb, nc, sc FROM d
  ON CONFLICT (rollout_id, stage, arm, segment, episode) DO UPDATE
    SET nb = t.nb + excluded.nb, sb = t.sb + excluded.sb,
        nc = t.nc + excluded.nc, sc = t.sc + excluded.sc
  RETURNING segment, episode, nb, sb, nc, sc
)
-- Per cell what the new ratings changed: old sums are the new less the added.
SELECT u.segment AS seg,
  sum(d.nb) AS nb, sum(d.sb) AS kb, count(*) FILTER (WHERE d.nb > 0 AND u.nb = d.nb) AS eb,
  sum(u.sb * u.sb - (u.sb - d.sb) * (u.sb - d.sb)) AS sqb,
  sum(u.sb * u.nb - (u.sb - d.sb) * (u.nb - d.nb)) AS crb,
  sum(u.nb * u.nb - (u.nb - d.nb) * (u.nb - d.nb)) AS nsqb,
  sum(d.nc) AS nc, sum(d.sc) AS kc, count(*) FILTER (WHERE d.nc > 0 AND u.nc = d.nc) AS ec,
  sum(u.sc * u.sc - (u.sc - d.sc) * (u.sc - d.sc)) AS sqc,
  sum(u.sc * u.nc - (u.sc - d.sc) * (u.nc - d.nc)) AS crc,
  sum(u.nc * u.nc - (u.nc - d.nc) * (u.nc - d.nc)) AS nsqc
FROM u JOIN d ON d.seg = u.segment AND d.ep = u.episode
GROUP BY u.segment"""
# A cell's sums, in the order stored: per side n, k, episodes, S^2, S n, n^2.
_FIELDS = ("nb", "kb", "eb", "sqb", "crb", "nsqb", "nc", "kc", "ec", "sqc", "crc", "nsqc")


@dataclass(frozen=True)
class Rated:
    """The ratings folded: of the pairs up to `upto`, those with ids up to `rated_upto`;
    each cell's sums (`_FIELDS`) by segment (`all` pooled)."""

    upto: Key | None = None
    rated_upto: int = 0
    cells: dict[str, tuple[float, ...]] = field(default_factory=dict)


def advance(
    session: Session, stored: dict[str, Any] | None, piece: Slice, policy: Policy
) -> tuple[dict[str, SidesSums], dict[str, Any]]:
    """Return the feedback cells' sums of the slice's rated live pairs up to `piece.upto`
    (by segment, `all` pooled), folding in the ratings and pairs new since `stored`; and
    what to store. `piece.after` is ignored: the stored state carries its own."""
    rated = load(stored)
    arm_key = piece.arm or NO_ARM
    if rated.upto is not None and rated.upto > piece.upto:
        rated = Rated()  # the fold started over: so do its ratings
    if rated.upto is None:
        _forget(session, piece, arm_key)
    last = int(session.scalar(select(func.coalesce(func.max(Feedback.id), 0))) or 0)
    if rated.upto == piece.upto and last == rated.rated_upto:
        return _cells(rated, policy), stored or dump(rated)  # nothing new: nothing to write
    rated = _added(session, rated, piece, policy, (last, arm_key))
    return _cells(rated, policy), dump(rated)


def _added(
    session: Session, rated: Rated, piece: Slice, policy: Policy, read: tuple[int, str]
) -> Rated:
    last, arm_key = read
    # No pair folded before: every rating is read with its pair, none needs the late scan.
    after = rated.rated_upto if rated.upto is not None else last
    params = {**replace(piece, after=rated.upto).params(policy), "rated_after": after,
              "rated_upto": last, "arm_key": arm_key}  # fmt: skip
    cells = dict(rated.cells)
    for row in session.execute(text(_ADVANCE), params).mappings():
        before = cells.get(row["seg"], (0.0,) * len(_FIELDS))
        cells[row["seg"]] = tuple(a + float(row[f]) for a, f in zip(before, _FIELDS, strict=True))
    return Rated(piece.upto, last, cells)


def _forget(session: Session, piece: Slice, arm_key: str) -> None:
    session.execute(
        delete(RatedEpisode).where(
            RatedEpisode.rollout_id == piece.rollout_id,
            RatedEpisode.stage == piece.stage,
            RatedEpisode.arm == arm_key,
        )
    )


def _cells(rated: Rated, policy: Policy) -> dict[str, SidesSums]:
    out = {}
    for segment, sums in rated.cells.items():
        if segment != ALL and segment not in policy.segments:
            continue  # defensive: undeclared segments are stored pooled only
        row = dict(zip(_FIELDS, sums, strict=True))
        out[segment] = SidesSums(
            TwoCounts(_counts(row, "b"), _counts(row, "c")), _sums(row, "b"), _sums(row, "c")
        )
    return out


def _counts(row: dict[str, float], side: str) -> CountStats:
    return CountStats(float(row[f"n{side}"]), float(row[f"k{side}"]))


def _sums(row: dict[str, float], side: str) -> EpisodeSums:
    fields = (f"e{side}", f"sq{side}", f"cr{side}", f"nsq{side}")
    return EpisodeSums(*(float(row[f]) for f in fields))


def load(stored: dict[str, Any] | None) -> Rated:
    """Return the stored ratings' state (none: nothing folded)."""
    if not stored:
        return Rated()
    upto = stored["upto"]
    key = None if upto is None else (datetime.fromisoformat(upto[0]), uuid.UUID(upto[1]))
    cells = {seg: tuple(float(x) for x in sums) for seg, sums in stored["cells"].items()}
    return Rated(key, int(stored["rated_upto"]), cells)


def dump(rated: Rated) -> dict[str, Any]:
    """Return the ratings' state as JSON."""
    upto = None if rated.upto is None else [rated.upto[0].isoformat(), str(rated.upto[1])]
    return {"upto": upto, "rated_upto": rated.rated_upto, "cells": rated.cells}
