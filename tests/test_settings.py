"""Settings come from SPECGATE_* variables and importing specgate does no I/O."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from gate.settings import Settings, load_settings


def test_defaults_are_the_embedded_store(monkeypatch, tmp_path):
    monkeypatch.delenv("SPECGATE_DATABASE_URL", raising=False)
    monkeypatch.setenv("SPECGATE_HOME", str(tmp_path))
    settings = load_settings()
    assert settings.resolved_database_url() == f"sqlite:///{tmp_path}/specgate.db"
    assert settings.embedded and settings.redis_url is None and settings.otlp_endpoint is None


def test_environment_overrides(monkeypatch):
    monkeypatch.setenv("SPECGATE_DATABASE_URL", " postgresql://db/x ")
    monkeypatch.setenv("SPECGATE_REDIS_URL", "redis://r:6379/0")
    monkeypatch.setenv("SPECGATE_MIRROR_MAX_CONCURRENCY", "8")
    settings = Settings()
    assert settings.resolved_database_url() == "postgresql://db/x" and not settings.embedded
    assert settings.redis_url == "redis://r:6379/0" and settings.mirror_max_concurrency == 8


def test_bad_limits_are_rejected(monkeypatch):
    monkeypatch.setenv("SPECGATE_CONTROL_RATE", "1.5")
    with pytest.raises(ValidationError, match="control_rate"):
        Settings()


def test_importing_every_module_touches_no_database_or_network(tmp_path):
    code = (
        "import pkgutil, importlib, gate, collectors, evaluators\n"
        "for pkg in (gate, collectors, evaluators):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if m.name != 'gate.__main__':\n"
        "            importlib.import_module(m.name)\n"
    )
    env = {
        **os.environ,
        "SPECGATE_DATABASE_URL": "postgresql://nobody:pw@127.0.0.1:1/none",
        "SPECGATE_REDIS_URL": "redis://127.0.0.1:1/0",
        "SPECGATE_HOME": str(tmp_path / "home"),
    }
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "home").exists()


def test_asking_for_logprobs_follows_the_policy_unless_switched_on_or_off(monkeypatch):
    assert Settings().ask_logprobs == "auto"
    for value, meant in (
        ("on", "on"),
        ("auto", "auto"),
        (" Auto", "auto"),
        ("OFF", "off"),
    ):
        monkeypatch.setenv("SPECGATE_ASK_LOGPROBS", value)
        assert Settings().ask_logprobs == meant
    # A boolean is refused: `on` and `off` name the switch, beside `auto`.
    for refused in ("sometimes", "true", "0"):
        monkeypatch.setenv("SPECGATE_ASK_LOGPROBS", refused)
        with pytest.raises(ValidationError, match="ask_logprobs"):
            Settings()
