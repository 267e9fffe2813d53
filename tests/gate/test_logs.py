"""One logging setup: every process writes time, level, logger and fields, at the set level."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from pathlib import Path

import pytest

from gate.logs import FailureLog, JsonFormatter, TextFormatter
from tests.collectors.test_collect_command import ready, run_collect
from tests.servers import closed_port

UNREACHABLE = "postgresql+psycopg://postgres@127.0.0.1:9/nowhere"


def lines_until(
    path: Path, wanted: str, process: subprocess.Popen[str], timeout: float = 60.0
) -> list[str]:
    deadline = time.monotonic() + timeout
    while wanted not in (text := path.read_text()):
        assert process.poll() is None and time.monotonic() < deadline, text[-3000:]
        time.sleep(0.1)
    return text.splitlines()


def test_collect_logs_json_with_info_events_and_a_failing_job_once(tmp_path):
    port = closed_port()
    env = {
        "SPECGATE_LOG_LEVEL": "DEBUG",
        "SPECGATE_LOG_FORMAT": "json",
        "SPECGATE_SCRAPE_INTERVAL_S": "0.1",
    }
    stderr = tmp_path / "stderr.log"
    with stderr.open("w") as sink:
        args = ("--port", str(port), "--database-url", UNREACHABLE)
        collector = run_collect(*args, home=tmp_path, env_extra=env, stderr=sink)
        try:
            # The database stays down: the scrape job fails every 0.1 s.
            lines = lines_until(stderr, '"times": "4"', collector)
            assert ready(f"http://127.0.0.1:{port}")
        finally:
            collector.terminate()
            collector.wait(60)
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert records and all({"time", "level", "logger", "event"} <= set(r) for r in records)
    events = [(r["level"], r["event"]) for r in records]
    assert ("INFO", "collector.writer_started") in events
    scrape = [
        r for r in records if r["event"] == "periodic_job_failed" and r["fields"]["key"] == "scrape"
    ]
    # Logged as an error once; every later turn is a DEBUG line that counts the turns.
    assert [r["level"] for r in scrape][:4] == ["ERROR", "DEBUG", "DEBUG", "DEBUG"]
    scrape_errors = [r for r in scrape if r["level"] == "ERROR"]
    assert len(scrape_errors) == 1
    assert "Traceback" in scrape_errors[0]["exception"]


def test_the_level_is_honoured_and_text_lines_carry_time_level_logger(tmp_path):
    port = closed_port()
    env = {"SPECGATE_LOG_LEVEL": "WARNING", "SPECGATE_SCRAPE_INTERVAL_S": "0.1"}
    stderr = tmp_path / "stderr.log"
    with stderr.open("w") as sink:
        args = ("--port", str(port), "--database-url", UNREACHABLE)
        collector = run_collect(*args, home=tmp_path, env_extra=env, stderr=sink)
        try:
            lines = lines_until(stderr, "periodic_job_failed", collector)
        finally:
            collector.terminate()
            collector.wait(60)
    text = "\n".join(lines)
    assert "collector.writer_started" not in text  # INFO, below the level
    failed = next(line for line in lines if "periodic_job_failed" in line)
    stamp, level, logger, event = failed.split(" ")[:4]
    assert stamp.endswith("Z") and level == "ERROR" and logger == "gate.periodic"
    assert event == "periodic_job_failed"


def test_a_repeated_failure_is_logged_when_it_starts_changes_and_ends(caplog):
    failures = FailureLog(logging.getLogger("test.failures"))
    with caplog.at_level(logging.INFO, logger="test.failures"):
        for error in ("down", "down", "down", "refused", "refused"):
            failures.failed("scrape", "job_failed", ConnectionError(error))
        failures.succeeded("scrape", "job_recovered")
        failures.succeeded("scrape", "job_recovered")
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "job_failed key=scrape error='ConnectionError: down'",
        "job_failed key=scrape error='ConnectionError: refused'",
        "job_recovered key=scrape failures=5",
    ]


@pytest.mark.parametrize("formatter", [TextFormatter(), JsonFormatter()])
def test_both_formats_keep_the_event_and_its_fields(formatter):
    record = logging.LogRecord(
        "collectors.writer", logging.ERROR, __file__, 1,
        "collector.spool_full spans=%d reason=%s error=%r", (3, "database_down", "a b"), None,
    )  # fmt: skip
    line = formatter.format(record)
    if isinstance(formatter, JsonFormatter):
        document = json.loads(line)
        assert document["event"] == "collector.spool_full" and document["level"] == "ERROR"
        assert document["fields"] == {"spans": "3", "reason": "database_down", "error": "a b"}
    else:
        assert " ERROR collectors.writer collector.spool_full spans=3 reason=database_down" in line


def test_logging_reads_its_variables_as_settings_do(monkeypatch):
    # Settings match variable names case-insensitively; logging once read os.environ
    # itself, so the two disagreed on what the process was configured with.
    from gate import logs
    from gate.settings import Settings

    monkeypatch.delenv("SPECGATE_LOG_FORMAT", raising=False)
    monkeypatch.delenv("SPECGATE_LOG_LEVEL", raising=False)
    monkeypatch.setenv("specgate_log_format", "json")
    monkeypatch.setenv("specgate_log_level", "warning")
    assert Settings().log_format == "json"
    assert logs.chosen() == ("WARNING", "json")
    assert logs.dict_config()["formatters"]["specgate"]["()"] == "gate.logs.JsonFormatter"


def test_a_format_the_settings_refuse_is_kept_for_the_warning_and_text_is_written(monkeypatch):
    from gate import logs

    monkeypatch.setenv("SPECGATE_LOG_FORMAT", "xml")
    monkeypatch.setenv("SPECGATE_LOG_LEVEL", "DEBUG")
    assert logs.chosen() == ("DEBUG", "xml")
    assert logs.dict_config()["formatters"]["specgate"]["()"] == "gate.logs.TextFormatter"
