"""Bad or unreachable databases give one line naming the masked URL."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gate.cli.exits import FAILURE, UNAVAILABLE
from gate.db.engine import check_connection, make_engine, mask_url, normalise_url
from gate.errors import ConfigError, DatabaseUnavailable


def test_mask_url_hides_the_password_even_when_unparseable():
    assert mask_url("postgresql://bob:hunter2@db:5432/x") == "postgresql://bob:***@db:5432/x"
    assert "hunter2" not in mask_url("postgresql+nosuch://bob:hunter2@db/x?%%")


def test_bare_postgres_urls_use_psycopg3():
    assert normalise_url("postgresql://h/db") == "postgresql+psycopg://h/db"
    assert normalise_url("sqlite:///x.db") == "sqlite:///x.db"


def test_invalid_url_is_a_config_error():
    with pytest.raises(ConfigError, match="invalid database URL 'not-a-url'"):
        make_engine("not-a-url")


def test_unknown_driver_is_a_config_error_with_masked_password():
    with pytest.raises(ConfigError) as caught:
        make_engine("mysql+nosuchdriver://bob:hunter2@127.0.0.1/x")
    assert "hunter2" not in caught.value.message and "***" in caught.value.message


def test_unreachable_database_names_the_masked_url():
    engine = make_engine("postgresql://bob:hunter2@127.0.0.1:1/x")
    with pytest.raises(DatabaseUnavailable) as caught:
        check_connection(engine)
    message = caught.value.message
    assert message.startswith("cannot reach database postgresql+psycopg://bob:***@127.0.0.1:1/x")
    assert "hunter2" not in message and "\n" not in message


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("postgresql://bob:hunter2@127.0.0.1:1/x", UNAVAILABLE),
        ("postgresql+nosuch://bob:hunter2@h/x", FAILURE),
    ],
)
def test_cli_prints_one_line_and_no_traceback(tmp_path, url, code):
    result = subprocess.run(
        [sys.executable, "-m", "gate", "status", "--database-url", url],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=60,
    )
    assert result.returncode == code
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("specgate: error:")
    assert "hunter2" not in result.stderr and "Traceback" not in result.stderr
