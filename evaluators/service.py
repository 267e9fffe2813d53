"""Evaluate a complete pair: score every side, compare the pair, store idempotently.

No commit here: the caller (the Celery task, a test, a replay) owns the transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from evaluators.base import (
    EvalResult,
    GenerationView,
    RequestView,
    run_evaluator,
    run_pair_evaluator,
)
from evaluators.registry import EvaluatorSet, build_evaluators
from gate.db import storage
from gate.db.enums import Cohort, PairState
from gate.db.models import Evaluation, Generation, Pair, RequestRecord, Rollout
from gate.errors import Conflict, NotFound
from gate.pairs.watermark import stamp_evaluated
from gate.verdicts.slices import pair_calls_since


class PairNotComplete(Conflict):
    """The pair is still open: its sides may not all have landed."""

    code = "pair_not_complete"


@dataclass(frozen=True)
class Scored:
    """One evaluator's result for one generation, and whether this call stored it."""

    generation_id: int | None
    cohort: str
    evaluator: str
    version: str
    result: EvalResult
    inserted: bool = False


def generation_view(row: Generation) -> GenerationView:
    """Return the evaluator's view of a generation row."""
    return GenerationView(
        cohort=str(row.cohort.value),
        status=str(row.status.value),
        output=row.output or "",
        output_extra=row.output_extra or {},
        finish_reason=row.finish_reason,
        temperature=row.temperature,
        output_tokens=row.output_tokens,
        error=row.error,
        generation_id=row.id,
        truncated=bool(row.output_truncated),
    )


def request_view(row: RequestRecord | None) -> RequestView:
    """Return the evaluator's view of a request row (empty when it was not captured)."""
    if row is None:
        return RequestView()
    return RequestView(
        body=row.body or {}, inputs=row.inputs or {}, truncated=frozenset(row.truncated or ())
    )


def score_pair(
    evaluators: EvaluatorSet, request: RequestView, sides: Sequence[GenerationView]
) -> list[Scored]:
    """Run side evaluators on every side and pair evaluators on baseline vs the others."""
    scored = []
    for evaluator in evaluators.side:
        # A cut body cannot say whether an evaluator applies: each one says "not evaluable".
        if not (request.truncated or evaluator.applies(request)):
            continue
        for side in sides:
            result = run_evaluator(evaluator, side, request)
            if result is not None:
                scored.append(_scored(side, evaluator.name, evaluator.version, result))
    baseline = next((s for s in sides if s.cohort == Cohort.BASELINE), None)
    others = [s for s in sides if s.cohort != Cohort.BASELINE]
    if baseline is None:
        return scored
    for pair_evaluator in evaluators.pair:
        for other in others:
            if pair_evaluator.applies(request, [baseline, other]):
                result = run_pair_evaluator(pair_evaluator, baseline, other)
                if result is not None:
                    scored.append(
                        _scored(other, pair_evaluator.name, pair_evaluator.version, result)
                    )
    return scored


def _scored(side: GenerationView, name: str, version: str, result: EvalResult) -> Scored:
    return Scored(side.generation_id, side.cohort, name, version, result)


def evaluate_pair(
    session: Session, *, pair_id: uuid.UUID, evaluators: EvaluatorSet | None = None
) -> list[Scored]:
    """Score a closed pair, insert its evaluations (rows already there are kept), stamp it;
    a pair stamped already is not scored again (return [])."""
    pair = session.get(Pair, pair_id, populate_existing=True)  # its stamp may be newer
    if pair is None:
        raise NotFound(f"pair {pair_id} not found")
    if pair.state == PairState.OPEN:
        raise PairNotComplete(f"pair {pair_id} is still open")
    if pair.evaluated_at is not None:
        return []  # scored already: a redelivered task, or a requeue of a slow first run
    if evaluators is None:
        rollout = session.get(Rollout, pair.rollout_id)
        evaluators = build_evaluators(rollout.policy if rollout else None)
    # From the pair's start, as its request and calls: a partitioned `generations` or
    # `requests` is read near it.
    since = pair_calls_since([pair.created_at])
    asked = RequestRecord.id == pair.request_id, RequestRecord.created_at >= since
    request = (
        session.scalars(select(RequestRecord).where(*asked)).first() if pair.request_id else None
    )
    calls = Generation.pair_id == pair_id, Generation.started_at >= since
    rows = session.scalars(select(Generation).where(*calls).order_by(Generation.id)).all()
    scored = score_pair(evaluators, request_view(request), [generation_view(r) for r in rows])
    started = {row.id: row.started_at for row in rows}
    stored = [_store(session, item, started) for item in scored]
    # Last, so the stamp's lock is held only until commit; a re-run keeps the first stamp,
    # so the gate never folds the pair twice.
    stamp_evaluated(session, pair_ids=[pair_id])
    return stored


def _store(session: Session, item: Scored, started: dict[int, datetime]) -> Scored:
    assert item.generation_id is not None  # scored from a stored generation
    values: dict[str, Any] = {
        "generation_id": item.generation_id,
        "generation_started_at": started[item.generation_id],
        "evaluator": item.evaluator,
        "version": item.version,
        "score": item.result.score,
        "passed": item.result.passed,
        "not_evaluable": item.result.not_evaluable,
        "details": item.result.details,
    }
    statement = (
        storage.of(session)
        .insert(Evaluation)
        .values(**values)
        # No target: right both unpartitioned, keyed (generation_id, evaluator, version), and
        # partitioned, whose unique key holds `generation_started_at` too.
        .on_conflict_do_nothing()
        .returning(Evaluation.id)
    )
    # A row comes back only when this call inserted it (rowcount is -1 on the ORM path).
    inserted = session.execute(statement).first() is not None
    return replace(item, inserted=inserted)
