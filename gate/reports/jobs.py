"""Entry points for schedulers: the weekly beat task calls `run_weekly`."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from gate.db.base import utcnow
from gate.db.engine import engine_from_settings, session_factory
from gate.reports.model import Week
from gate.reports.weekly import build_weekly
from gate.settings import Settings


def last_complete_week(now: datetime | None = None) -> Week:
    """Return the ISO week before the one holding `now`."""
    moment = now or utcnow()
    return Week.containing(moment - timedelta(days=7))


def report_dir(settings: Settings, week: Week, out_root: Path | None = None) -> Path:
    """Return where a week's files go: `<out_root or $SPECGATE_HOME/reports>/<week>`."""
    return (out_root or settings.home / "reports") / str(week)


def run_weekly(settings: Settings, *, week: str | None = None, out_root: Path | None = None) -> int:
    """Build, write and store one weekly report in its own transaction; return its row id."""
    target = Week.parse(week) if week else last_complete_week()
    db_engine = engine_from_settings(settings)
    try:
        with session_factory(db_engine)() as session, session.begin():
            report = build_weekly(session, target, out_dir=report_dir(settings, target, out_root))
            assert report.report_id is not None
            return report.report_id
    finally:
        db_engine.dispose()
