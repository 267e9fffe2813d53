"""Without Redis, evaluations run in the process that lands the pairs (`specgate serve`,
`specgate collect`, the demo): the SPECGATE_SANDBOX_* settings and the secrets to scrub
must reach that process's sandbox as they reach a Celery worker's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from evaluators.sandbox import CodeTest, Limits, configure, current_config, run_python
from gate.db.engine import make_engine, session_factory
from gate.pairs.runner import InProcessEvaluations, evaluation_queue
from gate.settings import Settings

SOLUTION = "def f():\n    return 1\n"
TESTS = [CodeTest("t", "assert f() == 1")]


@pytest.fixture(autouse=True)
def restore_sandbox() -> Iterator[None]:
    before = current_config()
    yield
    configure(before)


def embedded_queue(tmp_path, sqlite_url: str, **fields: object) -> None:
    settings = Settings(home=tmp_path, database_url=sqlite_url, **fields)  # type: ignore[arg-type]
    queue = evaluation_queue(settings, session_factory(make_engine(sqlite_url)))
    assert isinstance(queue, InProcessEvaluations)  # no Redis: this process evaluates
    queue.drain()


def test_the_configured_bubblewrap_boxes_the_embedded_evaluations(tmp_path, sqlite_url):
    assert run_python(SOLUTION, TESTS, Limits()).status == "passed"  # the real bwrap boxes
    embedded_queue(tmp_path, sqlite_url, sandbox_bwrap=str(tmp_path / "no-such-bwrap"))
    # The configured binary is the one used: it is missing, so code tests are not run.
    assert run_python(SOLUTION, TESTS, Limits()).status == "unavailable"


def test_the_embedded_sandbox_takes_the_uid_memory_and_secrets_settings(tmp_path, sqlite_url):
    embedded_queue(
        tmp_path,
        sqlite_url,
        sandbox_uid=4242,
        sandbox_memory_total_mb=777,
        secret_key=SecretStr("embedded-secret-key"),
    )
    config = current_config()
    assert (config.uid, config.memory_total_mb) == (4242, 777)
    assert "embedded-secret-key" in config.secrets  # scrubbed from what a box writes
