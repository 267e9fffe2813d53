"""Celery: eager in-process on SQLite; real workers on Redis and Postgres, one killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from gate.cli import worker
from gate.db.enums import Cohort, GenerationStatus
from gate.db.models import Evaluation, Generation
from gate.errors import ConfigError
from gate.settings import load_settings
from gate.worker.app import enqueue_pair_evaluation, make_celery
from tests.evaluators.factories import RIGHT, make_pair, make_rollout

OK = GenerationStatus.OK
ROOT = Path(__file__).resolve().parents[2]
# The candidate's code sleeps, so the task is surely running when its worker is killed.
SLOW_INPUTS = {"tests": {"cases": ["assert answer() == 42"], "timeout_s": 30}}
FAST_CODE = "```python\ndef answer():\n    return 42\n```"
SLOW_CODE = "```python\nimport time\n\ndef answer():\n    time.sleep(5)\n    return 42\n```"


def evaluations(factory, pair_id):
    with factory() as session:
        rows = session.execute(
            select(Generation.cohort, Evaluation.evaluator, Evaluation.version)
            .join(Evaluation, Evaluation.generation_id == Generation.id)
            .where(Generation.pair_id == pair_id)
        ).all()
    return sorted((c.value, e, v) for c, e, v in rows)


def duplicates(factory):
    with factory() as session:
        key = (Evaluation.generation_id, Evaluation.evaluator, Evaluation.version)
        statement = select(*key).group_by(*key).having(func.count() > 1)
        return session.execute(statement).all()


def test_without_redis_there_is_no_celery_app(sqlite_url):
    # Without a broker, evaluations run in-process (`gate.pairs.runner`), never via Celery.
    with pytest.raises(ConfigError, match="SPECGATE_REDIS_URL"):
        make_celery(load_settings(database_url=sqlite_url, redis_url=None))


class Worker:
    """A `specgate worker` subprocess with its log file."""

    def __init__(self, name: str, env: dict[str, str], log: Path) -> None:
        self.log = log
        command = [sys.executable, "-m", "gate.cli.worker", "--concurrency=1"]
        command += ["--visibility-timeout=3", f"--hostname={name}@test", "--loglevel=INFO"]
        self.handle = log.open("w")
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=self.handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def text(self) -> str:
        return self.log.read_text()

    def wait_for(self, needle: str, count: int = 1, timeout: float = 40.0) -> None:
        deadline = time.monotonic() + timeout
        while self.text().count(needle) < count:
            if time.monotonic() > deadline or self.process.poll() is not None:
                pytest.fail(f"worker never logged {needle!r} x{count}:\n{self.text()[-3000:]}")
            time.sleep(0.2)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.handle.close()


def wait_rows(factory, pair_id, expected, timeout=40.0):
    deadline = time.monotonic() + timeout
    while len(evaluations(factory, pair_id)) < expected and time.monotonic() < deadline:
        time.sleep(0.3)
    return evaluations(factory, pair_id)


@pytest.mark.postgres
@pytest.mark.redis
def test_real_workers_store_evaluations_once_even_when_one_is_killed_mid_task(
    pg_committing, pg_url, redis_url, tmp_path
):
    with pg_committing.begin() as session:
        rollout = make_rollout(session)
        quick = make_pair(
            session, rollout, [(Cohort.BASELINE, RIGHT, OK), (Cohort.CANDIDATE, RIGHT, OK)]
        )
        slow = make_pair(
            session,
            rollout,
            [(Cohort.BASELINE, FAST_CODE, OK), (Cohort.CANDIDATE, SLOW_CODE, OK)],
            inputs=SLOW_INPUTS,
        )
    env = {**os.environ, "SPECGATE_DATABASE_URL": pg_url, "SPECGATE_REDIS_URL": redis_url}
    app = make_celery(load_settings(database_url=pg_url, redis_url=redis_url))
    first = Worker("first", env, tmp_path / "first.log")
    second = None
    try:
        first.wait_for("ready.")
        # A pair becomes evaluations for both cohorts.
        enqueue_pair_evaluation(app, quick.id)
        assert len(wait_rows(pg_committing, quick.id, 5)) == 5
        # Delivered twice (at-least-once): the second run finds the pair stamped, scores
        # nothing and stores nothing.
        enqueue_pair_evaluation(app, quick.id)
        first.wait_for("inserted=0 kept=0")
        # Killed mid-task: nothing of the slow pair was committed.
        enqueue_pair_evaluation(app, slow.id)
        first.wait_for("received", count=3)
        time.sleep(2.0)
        first.kill()
        assert "inserted=3" not in first.text()
        assert evaluations(pg_committing, slow.id) == []
        # Another worker gets the message back after the visibility timeout.
        second = Worker("second", env, tmp_path / "second.log")
        rows = wait_rows(pg_committing, slow.id, 3)
        assert rows == [
            ("baseline", "task", "1"),
            ("candidate", "greedy_parity", "2"),
            ("candidate", "task", "1"),
        ]
        second.wait_for("inserted=3 kept=0")
        assert duplicates(pg_committing) == []
    finally:
        first.kill()
        if second is not None:
            second.kill()


def test_the_worker_command_refuses_to_start_without_redis(monkeypatch):
    monkeypatch.delenv("SPECGATE_REDIS_URL", raising=False)
    result = CliRunner().invoke(worker.app, ["--concurrency=1"])
    assert isinstance(result.exception, ConfigError)
    assert "needs SPECGATE_REDIS_URL" in result.exception.message
