"""Worker and beat liveness: the check Compose and Kubernetes run passes for a live
`specgate worker --beat` and fails for a hung (SIGSTOPped) worker or beat process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gate.worker.heartbeat import heartbeat_path
from tests.deploy.compose import specgate_executable

DEADLINE_S = 90.0
MAX_AGE_S = "5"


def check(home: Path, *components: str) -> subprocess.CompletedProcess[str]:
    """The liveness command, as the probes run it."""
    command = [sys.executable, "-m", "gate.worker.heartbeat", *components]
    return subprocess.run(
        [*command, "--max-age", MAX_AGE_S, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def wait_for(home: Path, components: tuple[str, ...], alive: bool, log: Path) -> str:
    """Poll the check until it says `alive`; return its last stderr."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        result = check(home, *components)
        if (result.returncode == 0) == alive:
            return result.stderr
        if time.monotonic() > deadline:
            pytest.fail(f"{components} never became alive={alive}: {result.stderr}\n"
                        f"{log.read_text()[-2000:]}")  # fmt: skip
        time.sleep(0.5)


@contextlib.contextmanager
def worker_with_beat(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[tuple[Path, Path]]:
    home, log = tmp_path / "home", tmp_path / "worker.log"
    env = {
        **os.environ,
        "SPECGATE_HOME": str(home),
        "SPECGATE_DATABASE_URL": pg_url,
        "SPECGATE_REDIS_URL": redis_url,
    }
    command = [specgate_executable(), "worker", "--beat", "--concurrency", "1"]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*command, "--heartbeat-s", "1"],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield home, log
    finally:
        os.killpg(process.pid, signal.SIGCONT)
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def writer(home: Path, component: str) -> int:
    """The pid of the process that writes `component`'s heartbeat."""
    return int(heartbeat_path(home, component).read_text())


@pytest.mark.postgres
@pytest.mark.redis
def test_the_liveness_check_fails_a_hung_worker_or_beat(tmp_path, pg_url, redis_url):
    with worker_with_beat(tmp_path, pg_url, redis_url) as (home, log):
        wait_for(home, ("worker", "beat"), alive=True, log=log)
        for hung, other in (("beat", "worker"), ("worker", "beat")):
            pid = writer(home, hung)
            os.kill(pid, signal.SIGSTOP)
            try:
                reason = wait_for(home, (hung,), alive=False, log=log)
                assert f"{hung}: last heartbeat" in reason
                assert check(home, "worker", "beat").returncode == 1
                assert check(home, other).returncode == 0, f"the {other} is still alive"
            finally:
                os.kill(pid, signal.SIGCONT)
            wait_for(home, ("worker", "beat"), alive=True, log=log)


def test_no_heartbeat_yet_is_not_alive(tmp_path):
    result = check(tmp_path, "worker")
    assert result.returncode == 1 and "worker: no heartbeat yet" in result.stderr
