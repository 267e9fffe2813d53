"""The shadow thumbs-down cell's sums for the live gate, read at each look (issue 39).

Ratings arrive after a pair is folded, so they are not folded: at each look one query
reads the stage's folded pairs that hold a rating (up to the fold's watermark, each
judged as the fold judged it: live, warm-up end, load tolerance, arm) and sums each
side's 0/1 thumbs-down per segment and pooled, with the episode sums replay keeps
(`EpisodeTwoCounts`: per episode S_e and n_e of each side). The query starts from the
ratings made since the stage began (`feedback.created_at >= :since`, indexed: a rating
follows its pair) and joins their generations and pairs by id.

An answer's outcome is its FIRST rating with thumbs (as the export writes it); a later
rating of the same answer changes nothing. The cell's bets multiply one factor per rated
answer (`gate.stats.betting`), and Ville's bound holds for factors that, once read, stay:
a factor replaced between looks (a rating changed from up to down) is no step of a
supermartingale, and re-rating could push the cell over its kill line. Conditioned on: a
rating's arrival (when, and whether, an answer is rated) independent of the candidate's
effect, so the rated answers at each look are a growing set whose outcomes never change.
"""

from __future__ import annotations

from sqlalchemy import RowMapping, text
from sqlalchemy.orm import Session

from gate.stats.episode_sums import EpisodeSums, SidesSums
from gate.stats.ids import ALL
from gate.stats.incremental import POOLED_ONLY
from gate.stats.policy import Policy
from gate.stats.sequences import CountStats, TwoCounts
from gate.verdicts.slices import RATED_SLICE, Slice

# Per side the first rating that carries thumbs (the export's), down: 1, other: 0.
_FIRST = """(SELECT CASE WHEN f.thumbs < 0 THEN 1.0 ELSE 0.0 END FROM feedback f
   WHERE f.generation_id = y.{side}_id AND f.thumbs IS NOT NULL ORDER BY f.id LIMIT 1)"""
_RATED = f"""{RATED_SLICE}, r AS (
  SELECT y.seg, coalesce(y.episode, CAST(y.id AS text)) AS ep,
         {_FIRST.format(side="b")} AS b_down, {_FIRST.format(side="c")} AS c_down
  FROM y WHERE y.live
), e AS (
  SELECT GROUPING(seg) AS pooled, seg, ep,
         count(b_down) AS nb, coalesce(sum(b_down), 0) AS sb,
         count(c_down) AS nc, coalesce(sum(c_down), 0) AS sc
  FROM r GROUP BY GROUPING SETS ((seg, ep), (ep))
)
SELECT pooled, seg,
  sum(nb) AS nb, sum(sb) AS kb, count(*) FILTER (WHERE nb > 0) AS eb, sum(sb * sb) AS sqb,
  sum(sb * nb) AS crb, sum(nb * nb) AS nsqb,
  sum(nc) AS nc, sum(sc) AS kc, count(*) FILTER (WHERE nc > 0) AS ec, sum(sc * sc) AS sqc,
  sum(sc * nc) AS crc, sum(nc * nc) AS nsqc
FROM e GROUP BY pooled, seg"""


def rated(session: Session, piece: Slice, policy: Policy) -> dict[str, SidesSums]:
    """Return the feedback cells' sums of the slice's rated live pairs, by segment (`all`
    pooled; undeclared segments count in the pooled cell only)."""
    out = {}
    for row in session.execute(text(_RATED), piece.params(policy)).mappings():
        # Rows per declared segment, the undeclared ones' bucket (`POOLED_ONLY`, pooled
        # only: skipped), and pooled.
        segment = ALL if row["pooled"] else row["seg"]
        if not row["pooled"] and (segment == POOLED_ONLY or segment not in policy.segments):
            continue
        out[segment] = SidesSums(
            TwoCounts(_counts(row, "b"), _counts(row, "c")),
            _sums(row, "b"),
            _sums(row, "c"),
        )
    return out


def _counts(row: RowMapping, side: str) -> CountStats:
    return CountStats(float(row[f"n{side}"]), float(row[f"k{side}"]))


def _sums(row: RowMapping, side: str) -> EpisodeSums:
    fields = (f"e{side}", f"sq{side}", f"cr{side}", f"nsq{side}")
    return EpisodeSums(*(float(row[f]) for f in fields))
