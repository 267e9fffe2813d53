"""Seeded traffic for dashboard and report tests, with the raw values kept for expectations."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from sqlalchemy import update
from sqlalchemy.orm import Session

from gate.db.enums import Cohort, Decision, GenerationStatus, Outcome, PairState
from gate.db.models import AuditEvent, Evaluation, Generation, Pair, Verdict
from gate.rollouts.states import Action
from gate.routing import service as routing

SEGMENTS = ("chat", "code")
EVALUATORS = ("groundedness", "schema")


@dataclass
class Arm:
    """How one cohort behaves: latency scale, failure odds, pass odds, acceptance per segment."""

    ttft_s: float = 0.2
    tpot_s: float = 0.02
    fail: float = 0.02
    passes: dict[str, float] = field(default_factory=lambda: dict.fromkeys(EVALUATORS, 0.9))
    acceptance: dict[str, float] | None = None
    # Odds that no route is answerable for a call (dropped or cancelled), and that an
    # evaluator could not judge an answer (not evaluable).
    lost: float = 0.0
    unjudged: float = 0.0


@dataclass
class Record:
    rollout_id: int
    cohort: str
    segment: str
    status: str
    started_at: datetime
    ttft_s: float | None
    tpot_s: float | None
    drafts: int | None
    draft_tokens: int | None
    accepted: int | None
    evaluations: dict[str, bool | None]


def traffic(
    db: Session,
    rollout_id: int,
    *,
    start: datetime,
    hours: float,
    pairs: int,
    baseline: Arm,
    candidate: Arm,
    seed: int,
    segments: tuple[str, ...] = SEGMENTS,
) -> list[Record]:
    """Add `pairs` pairs spread over [start, start + hours), both arms answered."""
    rng = np.random.default_rng(seed)
    records: list[Record] = []
    rows: list[Generation] = []
    for _ in range(pairs):
        at = start + timedelta(seconds=float(rng.uniform(0, hours * 3600)))
        segment = segments[int(rng.integers(len(segments)))]
        pair = Pair(
            id=uuid.uuid4(),
            rollout_id=rollout_id,
            state=PairState.COMPLETE,
            segment=segment,
            created_at=at,
            deadline=at + timedelta(minutes=5),
        )
        db.add(pair)
        for cohort, arm in ((Cohort.BASELINE, baseline), (Cohort.CANDIDATE, candidate)):
            row, record = _call(rng, pair, cohort, arm, at)
            rows.append(row)
            records.append(record)
    db.flush()  # pairs first: generations have no ORM relationship to order them by
    db.add_all(rows)
    db.flush()
    db.add_all(
        Evaluation(
            generation_id=row.id,
            generation_started_at=row.started_at,
            evaluator=name,
            version="1",
            passed=passed,
            not_evaluable="truncated" if passed is None else None,
        )
        for row, record in zip(rows, records, strict=True)
        for name, passed in record.evaluations.items()
    )
    db.flush()
    return records


def _call(
    rng: np.random.Generator, pair: Pair, cohort: Cohort, arm: Arm, at: datetime
) -> tuple[Generation, Record]:
    roll = rng.uniform()
    status = GenerationStatus.OK
    if roll < arm.fail:
        status = (GenerationStatus.ERROR, GenerationStatus.FALLBACK, GenerationStatus.TIMEOUT)[
            int(rng.integers(3))
        ]
    elif roll < arm.fail + arm.lost:
        status = (GenerationStatus.DROPPED, GenerationStatus.CANCELLED)[int(roll * 1e6) % 2]
    ok = status == GenerationStatus.OK
    ttft = float(arm.ttft_s * rng.lognormal(0, 0.5)) if ok else None
    tpot = float(arm.tpot_s * rng.lognormal(0, 0.3)) if ok else None
    drafts = draft_tokens = accepted = None
    if arm.acceptance is not None and ok:
        drafts = int(rng.integers(5, 40))
        draft_tokens = drafts * 4
        accepted = int(rng.binomial(draft_tokens, arm.acceptance[pair.segment]))
    row = Generation(
        rollout_id=pair.rollout_id,
        pair_id=pair.id,
        cohort=cohort,
        segment=pair.segment,
        status=status,
        ttft_s=ttft,
        tpot_s=tpot,
        spec_drafts=drafts,
        spec_draft_tokens=draft_tokens,
        spec_accepted_tokens=accepted,
        started_at=at,
        trace_id=uuid.uuid4().hex,
        span_id=uuid.uuid4().hex[:16],
    )
    evaluations: dict[str, bool | None] = {
        name: bool(rng.uniform() < odds) for name, odds in arm.passes.items()
    }
    if status.outcome is Outcome.NOT_ATTRIBUTABLE:
        evaluations = {}  # the evaluators leave such a side alone
    elif arm.unjudged:
        evaluations = {
            n: None if rng.uniform() < arm.unjudged else p for n, p in evaluations.items()
        }
    return row, Record(
        pair.rollout_id,
        cohort.value,
        pair.segment,
        status.value,
        at,
        ttft,
        tpot,
        drafts,
        draft_tokens,
        accepted,
        evaluations,
    )


def verdict(db: Session, rollout_id: int, decision: Decision, at: datetime, *codes: str) -> None:
    """Add a verdict at `at`."""
    db.add(
        Verdict(
            rollout_id=rollout_id,
            decision=decision,
            reason_codes=list(codes),
            summary=f"{decision.value} by seed",
            n_pairs=100,
            created_at=at,
        )
    )
    db.flush()


def act(db: Session, rollout_id: int, action: Action, at: datetime, reason: str) -> None:
    """Apply a state change as an operator would, then date its audit event `at`."""
    routing.change_state(
        db, rollout_id=rollout_id, action=action, actor="key:ops", reason=reason, publisher=None
    )
    newest = (
        db.query(AuditEvent.id)
        .filter(AuditEvent.rollout_id == rollout_id)
        .order_by(AuditEvent.id.desc())
        .limit(1)
        .scalar()
    )
    db.execute(update(AuditEvent).where(AuditEvent.id == newest).values(created_at=at))
    db.flush()
