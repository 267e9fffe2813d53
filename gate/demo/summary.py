"""What the demo prints: per segment and cohort, latency, acceptance and quality."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from gate.db.enums import Cohort, GenerationStatus
from gate.db.models import Evaluation, Generation
from gate.pairs.export import pair_records
from gate.parity import eligibility
from gate.stats.record_columns import parity_side

PARITY = "greedy_parity"


@dataclass
class SegmentRow:
    """One segment's numbers for both cohorts."""

    segment: str
    pairs: int
    ttft: dict[str, tuple[float, float]]  # cohort -> (p50, p99) seconds
    tpot: dict[str, tuple[float, float]]
    acceptance: float | None
    pass_rates: dict[str, dict[str, float]]  # evaluator -> cohort -> pass rate
    parity: float | None
    speedup: float | None  # baseline TPOT p50 / candidate TPOT p50
    burst: bool = False  # answers arrived in one burst: TPOT says nothing about decoding
    not_evaluable: int = 0  # results no evaluator could judge: outside the pass rates


def summarise(session: Session, *, rollout_id: int) -> list[SegmentRow]:
    """Return one row per segment, plus 'all'."""
    rows = (
        session.execute(
            select(Generation).where(
                Generation.rollout_id == rollout_id,
                Generation.cohort.in_((Cohort.BASELINE, Cohort.CANDIDATE)),
                Generation.pair_id.is_not(None),
            )
        )
        .scalars()
        .all()
    )
    evaluations = session.execute(
        select(Evaluation.generation_id, Evaluation.evaluator, Evaluation.passed)
        .join(Generation, Generation.id == Evaluation.generation_id)
        .where(Generation.rollout_id == rollout_id)
    ).all()
    passed: dict[int, dict[str, bool]] = defaultdict(dict)
    unjudged: dict[int, int] = defaultdict(int)
    for generation_id, name, ok in evaluations:
        if ok is None:  # not evaluable: neither a pass nor a fail, counted apart
            unjudged[generation_id] += 1
            continue
        passed[generation_id][name] = ok
    by_segment: dict[str, list[Generation]] = defaultdict(list)
    for g in rows:
        by_segment[g.segment].append(g)
        by_segment["all"].append(g)
    rows_out = [_row(seg, gens, passed) for seg, gens in sorted(by_segment.items(), key=_order)]
    for row in rows_out:
        row.not_evaluable = sum(unjudged[g.id] for g in by_segment[row.segment])
    return rows_out


def _order(item: tuple[str, list[Generation]]) -> tuple[bool, str]:
    return (item[0] == "all", item[0])


def _row(segment: str, gens: list[Generation], passed: dict[int, dict[str, bool]]) -> SegmentRow:
    ok = [g for g in gens if g.status is GenerationStatus.OK]
    ttft = {c.value: _p(ok, c, "ttft_s") for c in (Cohort.BASELINE, Cohort.CANDIDATE)}
    tpot = {c.value: _p(ok, c, "tpot_s") for c in (Cohort.BASELINE, Cohort.CANDIDATE)}
    cand = [g for g in ok if g.cohort is Cohort.CANDIDATE]
    drafted = sum(g.spec_draft_tokens or 0 for g in cand)
    accepted = sum(g.spec_accepted_tokens or 0 for g in cand)
    rates: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for g in gens:
        for name, ok_ in passed.get(g.id, {}).items():
            if name != PARITY:
                rates[name][g.cohort.value].append(ok_)
    parity = [passed[g.id][PARITY] for g in gens if PARITY in passed.get(g.id, {})]
    base, cand_tpot = tpot["baseline"][0], tpot["candidate"][0]
    # TPOT is undefined (NULL) for an answer that reached the gateway in one burst (a tool
    # call held back until complete): with none measured there is no speed to compare.
    burst = bool(ok) and base != base
    measurable = not burst and base == base and cand_tpot == cand_tpot and cand_tpot > 0
    return SegmentRow(
        segment=segment,
        pairs=len({g.pair_id for g in gens}),
        ttft=ttft,
        tpot=tpot,
        acceptance=accepted / drafted if drafted else None,
        pass_rates={n: {c: float(np.mean(v)) for c, v in by.items()} for n, by in rates.items()},
        parity=float(np.mean(parity)) if parity else None,
        speedup=base / cand_tpot if measurable else None,
        burst=burst,
    )


def _p(gens: list[Generation], cohort: Cohort, field: str) -> tuple[float, float]:
    values = [getattr(g, field) for g in gens if g.cohort is cohort]
    values = [v for v in values if v is not None]
    if not values:
        return (float("nan"), float("nan"))
    return (float(np.percentile(values, 50)), float(np.percentile(values, 99)))


@dataclass(frozen=True)
class Shift:
    """One statistic's paired difference d = candidate - baseline over eligible pairs."""

    n: int
    mean: float
    sd: float

    @property
    def t(self) -> float:
        """Return the mean over its standard error (NaN with fewer than 2 pairs)."""
        if self.n < 2 or self.sd <= 0:
            return float("nan")
        return self.mean / (self.sd / math.sqrt(self.n))


@dataclass(frozen=True)
class ParityCounts:
    """How many sampled pairs could enter the sampled-output parity test, why not, and d."""

    sampled: int  # pairs with a temperature on both sides
    eligible: int
    with_logprobs: int  # eligible pairs whose mean log-prob may be compared
    excluded: dict[str, int]  # `gate.parity.Exclusion` value -> pairs
    # Per statistic, d over every eligible pair (warm-up included), in the statistic's units.
    shifts: dict[str, Shift]


def parity_counts(session: Session, *, rollout_id: int) -> ParityCounts:
    """Return the rollout's pairs as `gate.parity.eligibility` sees them (control ones aside)."""
    excluded: Counter[str] = Counter()
    d: dict[str, list[float]] = defaultdict(list)
    sampled = eligible = with_logprobs = 0
    for record in pair_records(session, rollout_id=rollout_id):
        sides = [parity_side(record[cohort]) for cohort in ("baseline", "candidate")]
        if record["is_control"] or record["dropped"] or sides[0] is None or sides[1] is None:
            continue
        sampled += 1
        verdict = eligibility(sides[0][0], sides[1][0])
        if verdict.reason is not None:
            excluded[verdict.reason.value] += 1
            continue
        eligible += 1
        with_logprobs += verdict.logprobs
        base, cand = sides[0][1], sides[1][1]
        for stat in base.keys() & cand.keys():
            if stat != "mean_logprob" or verdict.logprobs:
                d[stat].append(cand[stat] - base[stat])
    shifts = {stat: _shift(values) for stat, values in sorted(d.items())}
    return ParityCounts(sampled, eligible, with_logprobs, dict(excluded), shifts)


def _shift(values: list[float]) -> Shift:
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")
    return Shift(len(values), float(np.mean(values)), sd)
