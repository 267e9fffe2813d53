"""One logging setup for every specgate process: time, level, logger, then key=value or JSON.

Every event is one line: an event name and `key=value` fields (STYLE.md). `text` writes
them as they are after a UTC timestamp, the level and the logger; `json` writes one
object per line with the same facts, the fields parsed out. `SPECGATE_LOG_LEVEL` and
`SPECGATE_LOG_FORMAT`, read as settings (`gate.settings.LogSettings`), choose in every
process: `serve`, `collect` and its workers, `worker`, `engine`, `demo`.
"""

from __future__ import annotations

import json
import logging
import logging.config
import re
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from gate.settings import LogSettings

FORMATS = ("text", "json")
_FIELD = re.compile(r"""([A-Za-z_][\w.]*)=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\S+)""")


def configure(level: str | None = None, fmt: str | None = None) -> None:
    """Send every logger's records to stderr in one format, at one level (default: env)."""
    logging.config.dictConfig(dict_config(level, fmt))
    logging.captureWarnings(True)
    level, fmt = chosen(level, fmt)
    log = logging.getLogger(__name__)
    if not isinstance(logging.getLevelName(level), int):
        log.warning("logging_misconfigured log_level=%r using=INFO", level)
    if fmt not in FORMATS:
        log.warning("logging_misconfigured log_format=%r using=text", fmt)


def dict_config(level: str | None = None, fmt: str | None = None) -> dict[str, Any]:
    """Return the `logging.config.dictConfig` of `configure`; uvicorn takes it as its
    `log_config`, and applies it again in each worker process it spawns."""
    name, picked = chosen(level, fmt)
    formatter = JsonFormatter if picked == "json" else TextFormatter
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"specgate": {"()": f"{__name__}.{formatter.__name__}"}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "specgate",
                "stream": "ext://sys.stderr",
            }
        },
        # uvicorn's own loggers go through the same handler, at their own level.
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": True},
            # Alembic narrates every schema check at INFO ("Context impl ..."): a command
            # that only reads the revision must still fail in one line. Warnings pass.
            "alembic": {"level": "WARNING"},
        },
        "root": {
            "handlers": ["stderr"],
            "level": name if isinstance(logging.getLevelName(name), int) else "INFO",
        },
    }


def chosen(level: str | None = None, fmt: str | None = None) -> tuple[str, str]:
    """Return the level and format: the arguments, else the settings' (`LogSettings`)."""
    try:
        settings = LogSettings()
        setting: str = settings.log_format
    except ValidationError as exc:
        # A format the settings refuse is returned as given: `configure` warns, writes text.
        settings = LogSettings(log_format="text")
        setting = str(exc.errors()[0]["input"])
    return (level or settings.log_level).upper(), (fmt or setting).lower()


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TextFormatter(logging.Formatter):
    """`<UTC time> <LEVEL> <logger> <event> key=value ...`, then any traceback."""

    def format(self, record: logging.LogRecord) -> str:
        """Return one line (more with a traceback)."""
        line = f"{_timestamp(record)} {record.levelname} {record.name} {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, event, fields, message, exception."""

    def format(self, record: logging.LogRecord) -> str:
        """Return one line of JSON."""
        message = record.getMessage()
        document: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "event": message.split(" ", 1)[0],
            "fields": {key: _unquote(value) for key, value in _FIELD.findall(message)},
            "message": message,
        }
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


class FailureLog:
    """Logs a repeated failure when it starts or changes (with its traceback) and when it
    ends, rather than on every turn."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._failing: dict[str, tuple[str, int]] = {}

    def failed(self, key: str, event: str, exc: BaseException) -> None:
        """Record one failure of `key`; log it only if it is new or different."""
        summary = _summary(exc)
        previous, count = self._failing.get(key, ("", 0))
        self._failing[key] = (summary, count + 1)
        if summary != previous:
            self._log.error("%s key=%s error=%r", event, key, summary, exc_info=exc)
        else:
            self._log.debug("%s key=%s error=%r times=%d", event, key, summary, count + 1)

    def succeeded(self, key: str, event: str) -> None:
        """Record a success of `key`; log the recovery if it was failing."""
        _, count = self._failing.pop(key, ("", 0))
        if count:
            self._log.info("%s key=%s failures=%d", event, key, count)


def _summary(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
