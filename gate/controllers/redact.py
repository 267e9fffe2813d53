"""Keep hook tokens out of access logs: they travel in the URL path (Flagger has no headers)."""

from __future__ import annotations

import logging
import re

HOOK_PATH = re.compile(r"(/v1/hooks/flagger/[^/\s?]+/)[^/\s?\"]+")
REDACTED = r"\1***"


def redact(text: str) -> str:
    """Replace every hook token in `text`."""
    return HOOK_PATH.sub(REDACTED, text)


class RedactTokens(logging.Filter):
    """Rewrites a record's message and arguments before any handler formats them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        return True


def install(logger_names: tuple[str, ...] = ("uvicorn.access", "uvicorn.error")) -> None:
    """Add the filter to the servers' loggers once."""
    for name in logger_names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in logger.filters):
            logger.addFilter(RedactTokens())
