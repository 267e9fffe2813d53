"""The fold's episode sums: what a stage's cells need beyond their plain sums (issue 39).

An `EpisodeMean` (`gate.stats.sequences`) holds, beside a cell's count, sum and sum of
squares, four sums over episodes: the episodes with a value, and of S_e^2, S_e n_e and
n_e^2. They add over episodes but not over pairs, so the Postgres fold keeps them per cell
(metric x declared segment, and pooled: an episode crossing segments is one episode of the
pooled cell and one per segment it touched) and adds what a slice's pairs change in them
given the earlier pairs of their episodes (`gate.verdicts.episodes`). A pair without an
episode is its own, with episode sums equal to its plain sums (`alone`), so a slice that
names no episode needs no query. `episodic` turns a plain cell and its sums into what
replay builds; the fold does so only once an episode of the stage holds two pairs
(replay's `_episode_column`), before which the statistics are those of independent pairs.

Keys: a cell's metric id (`tpot`, `parity:length`, `eval:judge`); `control:<metric>` for
the control slice's parity cells; `baseline:<metric>` and `candidate:<metric>` for the two
sides of a two-proportion cell (greedy mismatch: the control slice's and the candidate
pairs' 0/1 mismatches, `side_keys`); `band:<i>` for the load bands; `live` for the pairs the
gate tests (its episodes are the verdict's episode count). All but `band:`, `control:`
and `live` per declared segment and pooled (`all`); those pooled only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gate.stats.sequences import (
    CountStats,
    EpisodeCounts,
    EpisodeMean,
    EpisodeTwoCounts,
    MeanStats,
    PairedCounts,
    TwoCounts,
)

LIVE = "live"


@dataclass(frozen=True)
class EpisodeSums:
    """Sums over a cell's episodes: episodes with a value, S_e^2, S_e n_e and n_e^2."""

    episodes: float = 0.0
    sq: float = 0.0
    cross: float = 0.0
    n_sq: float = 0.0


# Key -> segment (declared, or `all` pooled) -> sums.
Sums = Mapping[str, Mapping[str, EpisodeSums]]
NONE = EpisodeSums()
_NO_TRIALS = TwoCounts(CountStats(0.0, 0.0), CountStats(0.0, 0.0))


@dataclass(frozen=True)
class SidesSums:
    """A two-proportion cell's counts and each side's episode sums: what the live gate
    reads of the ratings (`gate.verdicts.feedback`)."""

    counts: TwoCounts = _NO_TRIALS
    baseline: EpisodeSums = NONE
    candidate: EpisodeSums = NONE

    def cell(self, episodic: bool) -> TwoCounts:
        """Return the cell: with its episode sums where `episodic` (as replay builds it)."""
        if not episodic:
            return self.counts
        return episodic_sides(self.counts, self.baseline, self.candidate)


def control_key(metric: str) -> str:
    """Return the key of a control cell's episode sums."""
    return f"control:{metric}"


def band_key(band: int) -> str:
    """Return the key of a load band's episode sums."""
    return f"band:{band}"


def side_keys(metric: str) -> tuple[str, str]:
    """Return the keys of a two-proportion cell's sides' episode sums (baseline, candidate)."""
    return f"baseline:{metric}", f"candidate:{metric}"


def outcomes(counts: CountStats) -> MeanStats:
    """Return a proportion's trials as the mean of their 0/1 outcomes."""
    return MeanStats(counts.n, counts.k, counts.k)


def difference(counts: PairedCounts) -> MeanStats:
    """Return paired 0/1 counts as the mean of their differences in {-1, 0, 1}."""
    return MeanStats(counts.n, counts.worse - counts.better, counts.worse + counts.better)


def alone(plain: MeanStats | PairedCounts) -> EpisodeSums:
    """Return the episode sums of values that are each their own episode."""
    mean = difference(plain) if isinstance(plain, PairedCounts) else plain
    n, total, total_sq = (float(x) for x in (mean.n, mean.total, mean.total_sq))
    return EpisodeSums(n, total_sq, total, n)


def scaled(sums: EpisodeSums, scale: float | None) -> EpisodeSums:
    """Return the sums of d as sums of z = d / scale (none without a scale)."""
    if scale is None:
        return NONE
    return EpisodeSums(sums.episodes, sums.sq / scale**2, sums.cross / scale, sums.n_sq)


def episodic(cell: MeanStats | PairedCounts, sums: EpisodeSums) -> EpisodeMean | EpisodeCounts:
    """Return a plain cell with its episode sums, as replay builds it with episodes."""
    if isinstance(cell, PairedCounts):
        mean = episodic(difference(cell), sums)
        assert isinstance(mean, EpisodeMean)
        return EpisodeCounts(cell.n, cell.worse, cell.better, mean)
    return EpisodeMean(
        cell.n, cell.total, cell.total_sq, sums.episodes, sums.sq, sums.cross, sums.n_sq
    )


def episodic_sides(
    cell: TwoCounts, baseline: EpisodeSums, candidate: EpisodeSums
) -> EpisodeTwoCounts:
    """Return a two-proportion cell with each side's episode sums, as replay builds it."""
    sides = [
        episodic(outcomes(c), s)
        for c, s in ((cell.baseline, baseline), (cell.candidate, candidate))
    ]
    assert all(isinstance(side, EpisodeMean) for side in sides)
    return EpisodeTwoCounts(cell.baseline, cell.candidate, *sides)  # type: ignore[arg-type]


def merge(a: Sums, b: Sums) -> dict[str, dict[str, EpisodeSums]]:
    """Return two sets of episode sums added cell by cell."""
    out = {key: dict(per) for key, per in a.items()}
    for key, per in b.items():
        mine = out.setdefault(key, {})
        for segment, s in per.items():
            old = mine.get(segment, NONE)
            mine[segment] = EpisodeSums(
                old.episodes + s.episodes, old.sq + s.sq, old.cross + s.cross, old.n_sq + s.n_sq
            )
    return out


def dump(sums: Sums) -> dict[str, dict[str, list[float]]]:
    """Return episode sums as JSON."""
    return {
        key: {seg: [s.episodes, s.sq, s.cross, s.n_sq] for seg, s in per.items()}
        for key, per in sums.items()
    }


def load(doc: Mapping[str, Mapping[str, list[float]]] | None) -> dict[str, dict[str, EpisodeSums]]:
    """Return episode sums from their `dump`."""
    return {
        key: {seg: EpisodeSums(*(float(x) for x in raw)) for seg, raw in per.items()}
        for key, per in (doc or {}).items()
    }
