"""Statements over generations, evaluations, verdicts and audit events. Never commits.

Quantiles run in SQL where the storage can (Postgres: `percentile_cont`); elsewhere (the
embedded SQLite) the values are fetched and interpolated the same way with numpy, so both
give identical numbers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import (
    ColumnElement,
    case,
    func,
    select,
    union,
)
from sqlalchemy.orm import Session

from gate.db import storage
from gate.db.enums import Cohort, GenerationStatus
from gate.db.models import AuditEvent, Evaluation, Generation, Pair, Rollout, Verdict

Key = tuple[Any, ...]
# Audit actions that change what a rollout serves, shown on timelines.
STATE_ACTIONS = ("start", "kill", "hold", "resume", "promote", "advance")


@dataclass(frozen=True)
class Window:
    """One rollout (or all, when None) over the half-open interval [since, until)."""

    rollout_id: int | None
    since: datetime
    until: datetime


@dataclass(frozen=True)
class Quantiles:
    """How many values a group held and their quantiles at the requested probabilities."""

    n: int
    values: tuple[float, ...]


@dataclass(frozen=True)
class AcceptanceRow:
    segment: str
    calls: int
    drafts: int
    draft_tokens: int
    accepted_tokens: int


@dataclass(frozen=True)
class PassRow:
    """Judged results (`n`, of which `passed`) and those not evaluable, kept apart."""

    evaluator: str
    cohort: Cohort
    n: int
    passed: int
    not_evaluable: int = 0


@dataclass(frozen=True)
class StatusRow:
    bucket: int | None
    cohort: Cohort
    status: GenerationStatus
    count: int


def epoch_bucket(session: Session, column: Any, step: int) -> ColumnElement[int]:
    """Return the start (epoch seconds) of the `step`-second bucket holding `column`."""
    return storage.of(session).epoch_bucket(column, step)


def generation_filter(window: Window) -> list[ColumnElement[bool]]:
    """Return the WHERE clauses for the generations of a window."""
    clauses = [Generation.started_at >= window.since, Generation.started_at < window.until]
    if window.rollout_id is not None:
        clauses.append(Generation.rollout_id == window.rollout_id)
    return clauses


def _evaluation_window(window: Window) -> list[ColumnElement[bool]]:
    started = Evaluation.generation_started_at
    return [started >= window.since, started < window.until]


def quantiles(
    session: Session,
    *,
    value: Any,
    keys: Sequence[Any],
    where: Sequence[ColumnElement[bool]],
    probs: Sequence[float],
) -> dict[Key, Quantiles]:
    """Return linear-interpolated quantiles of `value` per group of `keys` (NULLs skipped)."""
    clauses = [*where, value.is_not(None)]
    in_sql = storage.of(session).percentiles(value, probs)
    if in_sql is not None:
        statement = select(*keys, func.count(value), in_sql).where(*clauses).group_by(*keys)
        found: dict[Key, Quantiles] = {}
        for row in session.execute(statement):
            *key, n, values = row
            found[tuple(key)] = Quantiles(n=int(n), values=tuple(float(v) for v in values))
        return found
    groups: dict[Key, list[float]] = defaultdict(list)
    for row in session.execute(select(*keys, value).where(*clauses)):
        *key, v = row
        groups[tuple(key)].append(float(v))
    return {
        key: Quantiles(n=len(vs), values=tuple(float(q) for q in np.quantile(vs, list(probs))))
        for key, vs in groups.items()
    }


def acceptance(session: Session, window: Window) -> list[AcceptanceRow]:
    """Sum the candidate's speculative counters per segment (successful calls only)."""
    statement = (
        select(
            Generation.segment,
            func.count(),
            func.coalesce(func.sum(Generation.spec_drafts), 0),
            func.coalesce(func.sum(Generation.spec_draft_tokens), 0),
            func.coalesce(func.sum(Generation.spec_accepted_tokens), 0),
        )
        .where(
            *generation_filter(window),
            Generation.cohort == Cohort.CANDIDATE,
            Generation.status == GenerationStatus.OK,
            Generation.spec_draft_tokens.is_not(None),
        )
        .group_by(Generation.segment)
        .order_by(Generation.segment)
    )
    return [
        AcceptanceRow(row[0], *(int(v or 0) for v in row[1:])) for row in session.execute(statement)
    ]


def pass_counts(session: Session, window: Window) -> list[PassRow]:
    """Count judged evaluations, passes and not-evaluable results per evaluator and cohort.

    A not-evaluable result (`passed` NULL) is neither a pass nor a fail: it is left out of
    `n` and counted on its own.
    """
    passed = func.sum(case((Evaluation.passed.is_(True), 1), else_=0))
    unjudged = func.sum(case((Evaluation.passed.is_(None), 1), else_=0))
    statement = (
        select(
            Evaluation.evaluator, Generation.cohort, func.count(Evaluation.passed), passed, unjudged
        )
        .join(Generation, Generation.id == Evaluation.generation_id)
        # The window on the evaluations' copy of their generation's start too, so a
        # partitioned `evaluations` is read only in it.
        .where(*generation_filter(window), *_evaluation_window(window))
        .group_by(Evaluation.evaluator, Generation.cohort)
        .order_by(Evaluation.evaluator, Generation.cohort)
    )
    return [
        PassRow(e, Cohort(c), int(n), int(p or 0), int(u or 0))
        for e, c, n, p, u in session.execute(statement)
    ]


def status_counts(session: Session, window: Window, *, step: int | None) -> list[StatusRow]:
    """Count generations per (time bucket,) cohort and status."""
    bucket = epoch_bucket(session, Generation.started_at, step) if step else None
    keys: list[Any] = [Generation.cohort, Generation.status]
    if bucket is not None:
        keys.insert(0, bucket)
    statement = (
        select(*keys, func.count())
        .where(*generation_filter(window))
        .group_by(*keys)
        .order_by(*keys)
    )
    rows = []
    for row in session.execute(statement):
        *head, cohort, status, count = row
        when = int(head[0]) if head and head[0] is not None else None
        rows.append(StatusRow(when, Cohort(cohort), GenerationStatus(status), int(count)))
    return rows


def verdicts(session: Session, window: Window) -> list[Verdict]:
    """Return the verdicts of a window, oldest first."""
    statement = select(Verdict).where(
        Verdict.created_at >= window.since, Verdict.created_at < window.until
    )
    if window.rollout_id is not None:
        statement = statement.where(Verdict.rollout_id == window.rollout_id)
    return list(session.scalars(statement.order_by(Verdict.created_at, Verdict.id)))


def state_changes(
    session: Session, window: Window, *, actions: Sequence[str] = STATE_ACTIONS
) -> list[AuditEvent]:
    """Return the audit events that changed a rollout's state in a window, oldest first."""
    statement = select(AuditEvent).where(
        AuditEvent.created_at >= window.since,
        AuditEvent.created_at < window.until,
        AuditEvent.action.in_(actions),
        AuditEvent.rollout_id.is_not(None),
    )
    if window.rollout_id is not None:
        statement = statement.where(AuditEvent.rollout_id == window.rollout_id)
    return list(session.scalars(statement.order_by(AuditEvent.created_at, AuditEvent.id)))


def latest_verdicts(session: Session, *, rollout_id: int | None = None) -> dict[int, Verdict]:
    """Return each rollout's newest verdict (or only `rollout_id`'s)."""
    newest_ids = select(func.max(Verdict.id)).group_by(Verdict.rollout_id)
    if rollout_id is not None:
        newest_ids = newest_ids.where(Verdict.rollout_id == rollout_id)
    newest = newest_ids.scalar_subquery()
    rows = session.scalars(select(Verdict).where(Verdict.id.in_(newest)))
    return {v.rollout_id: v for v in rows}


def active_rollouts(session: Session, *, since: datetime, until: datetime) -> list[Rollout]:
    """Return rollouts with generations, verdicts or state changes in [since, until)."""
    ids = union(
        select(Generation.rollout_id).where(*generation_filter(Window(None, since, until))),
        select(Verdict.rollout_id).where(Verdict.created_at >= since, Verdict.created_at < until),
        select(AuditEvent.rollout_id).where(
            AuditEvent.created_at >= since, AuditEvent.created_at < until
        ),
    ).subquery()
    statement = select(Rollout).where(Rollout.id.in_(select(ids.c[0]))).order_by(Rollout.id)
    return list(session.scalars(statement))


def stage_pace(session: Session, *, rollout_id: int, stage: int) -> tuple[int, datetime | None]:
    """Return the stage's evaluated pairs and when its first pair arrived."""
    count, first = session.execute(
        select(func.count(Pair.id), func.min(Pair.created_at)).where(
            Pair.rollout_id == rollout_id, Pair.stage == stage, Pair.evaluated_at.is_not(None)
        )
    ).one()
    return int(count or 0), first


def first_seen(session: Session, *, rollout_id: int) -> datetime | None:
    """Return when the rollout's first pair or verdict was recorded."""
    times = [
        session.scalar(select(func.min(Pair.created_at)).where(Pair.rollout_id == rollout_id)),
        session.scalar(
            select(func.min(Verdict.created_at)).where(Verdict.rollout_id == rollout_id)
        ),
    ]
    return min((t for t in times if t is not None), default=None)
