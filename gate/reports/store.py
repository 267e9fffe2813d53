"""Stored reports: one row per (kind, period); generating again updates it. Never commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gate.db.base import utcnow
from gate.db.models import Report
from gate.errors import NotFound


def upsert(
    session: Session,
    *,
    kind: str,
    period: str,
    markdown: str,
    location: str | None,
    summary: dict[str, Any],
) -> Report:
    """Insert or replace the report of `kind` for `period`."""
    statement = select(Report).where(Report.kind == kind, Report.period == period)
    row = session.scalars(statement.with_for_update()).one_or_none()
    if row is None:
        row = Report(kind=kind, period=period)
        session.add(row)
    row.markdown = markdown
    row.location = location
    row.summary = summary
    row.created_at = utcnow()
    session.flush()
    return row


def list_reports(
    session: Session, *, kind: str | None = None, limit: int = 100
) -> Sequence[Report]:
    """Return reports, newest period first."""
    statement = select(Report).order_by(Report.period.desc(), Report.id.desc()).limit(limit)
    if kind is not None:
        statement = statement.where(Report.kind == kind)
    return session.scalars(statement).all()


def get_report(session: Session, report_id: int) -> Report:
    """Return one report or raise NotFound."""
    row = session.get(Report, report_id)
    if row is None:
        raise NotFound(f"report {report_id} not found")
    return row
