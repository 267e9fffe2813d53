"""One job table: Celery beat and the embedded loop run the same jobs, weekly report included."""

from __future__ import annotations

from datetime import UTC, datetime

from celery.schedules import crontab

from gate.db.engine import make_engine, session_factory
from gate.periodic import JOBS, JobContext, Weekly, jobs
from gate.settings import Settings
from gate.worker.app import beat_schedule, make_celery


def test_beat_and_the_embedded_loop_read_the_same_table(tmp_path, redis_url):
    settings = Settings(
        home=tmp_path,
        database_url=f"sqlite:///{tmp_path}/x.db",
        scrape_interval_s=7,
        redis_url=redis_url,
    )
    context = JobContext(
        settings, session_factory(make_engine(settings.database_url)), None, [].extend
    )
    loop_jobs = {job.name: job for job in jobs(context)}
    schedule = beat_schedule(settings)
    assert set(loop_jobs) == {job.name for job in JOBS}
    assert set(schedule) == {job.task for job in JOBS}
    assert "weekly_report" in loop_jobs and "specgate.weekly_report" in schedule
    assert loop_jobs["scrape"].period == 7 and schedule["specgate.scrape"]["schedule"] == 7
    app = make_celery(settings)
    assert all(job.task in app.tasks for job in JOBS)


def test_the_weekly_report_runs_monday_morning_in_beat_and_the_loop(tmp_path):
    weekly = beat_schedule(Settings(home=tmp_path))["specgate.weekly_report"]["schedule"]
    assert isinstance(weekly, crontab)
    # crontab counts from Sunday: 1 is Monday.
    assert weekly.day_of_week == {1} and weekly.hour == {6} and weekly.minute == {0}
    monday_6 = Weekly(weekday=0, hour=6)
    sunday_noon = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    assert monday_6.seconds_after(sunday_noon) == 18 * 3600
    just_after = datetime(2026, 11, 23, 6, 0, 1, tzinfo=UTC)
    assert monday_6.seconds_after(just_after) == 7 * 86400 - 1


def test_the_embedded_loops_weekly_job_writes_and_stores_the_report(sqlite_url, tmp_path):
    settings = Settings(home=tmp_path, database_url=sqlite_url)
    context = JobContext(settings, session_factory(make_engine(sqlite_url)), None, [].extend)
    weekly = next(job for job in jobs(context) if job.name == "weekly_report")
    report_id = weekly.run()
    assert isinstance(report_id, int) and report_id > 0
    written = list((tmp_path / "reports").rglob("*.md"))
    assert written, "the report's Markdown is written under SPECGATE_HOME/reports"


def test_every_job_runs_to_its_end_in_the_loop_and_as_beats_task(sqlite_url, tmp_path, redis_url):
    # A job that raises after its work is logged as failing on every turn (the loop) and
    # ends as a failed task (beat): each one must run through on a store with nothing to do.
    settings = Settings(home=tmp_path, database_url=sqlite_url)
    context = JobContext(settings, session_factory(make_engine(sqlite_url)), None, [].extend)
    for job in jobs(context):
        assert isinstance(job.run(), int), job.name
    app = make_celery(settings.model_copy(update={"redis_url": redis_url}))
    for job in JOBS:
        result = app.tasks[job.task].apply()
        assert result.successful(), (job.task, result.result)
