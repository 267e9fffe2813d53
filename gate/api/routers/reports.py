"""Stored regression reports (read scope)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel

from gate.api.deps import Reader, SessionDep
from gate.db.models import Report
from gate.reports import store

router = APIRouter(prefix="/v1", tags=["reports"])


class ReportBrief(BaseModel):
    id: int
    kind: str
    period: str
    location: str | None
    regressions: int
    created_at: datetime
    # The findings in words: "0 regression(s)" alone would hide "not enough data to call".
    summary_text: str = ""


class ReportOut(ReportBrief):
    markdown: str
    summary: dict[str, Any]


def _brief(row: Report) -> dict[str, Any]:
    found = row.summary.get("regressions", [])
    count = len(found) if isinstance(found, list) else 0
    early = row.summary.get("not_enough_data") or []
    text = f"{count} regression(s)" + (
        f"; not enough data to call {', '.join(map(str, early))}" if early else ""
    )
    return {
        "summary_text": text,
        "id": row.id,
        "kind": row.kind,
        "period": row.period,
        "location": row.location,
        "regressions": len(found) if isinstance(found, list) else 0,
        "created_at": row.created_at,
    }


@router.get("/reports", response_model=list[ReportBrief])
def list_reports(
    db: SessionDep,
    _: Reader,
    kind: Annotated[str | None, Query(max_length=16)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[ReportBrief]:
    """Reports, newest period first."""
    return [ReportBrief(**_brief(r)) for r in store.list_reports(db, kind=kind, limit=limit)]


@router.get("/reports/{report_id}", response_model=ReportOut)
def get_report(
    report_id: Annotated[int, Path(ge=1, le=2**31 - 1)], db: SessionDep, _: Reader
) -> ReportOut:
    """One report: its Markdown summary, its numbers and where its files are."""
    row = store.get_report(db, report_id)
    return ReportOut(**_brief(row), markdown=row.markdown, summary=row.summary)
